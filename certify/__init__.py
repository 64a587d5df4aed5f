"""`pytest certify`: the certification plugin and suites (DESIGN §6)."""
