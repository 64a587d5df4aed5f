"""Runtime catalog data, trusted keys, signed entries and their signing code."""
