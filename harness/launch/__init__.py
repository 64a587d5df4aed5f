"""Launchers: start an engine as a managed process or an OCI container (DESIGN §4)."""
