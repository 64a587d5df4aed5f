"""The ``hitch`` CLI (typer). Commands live in one module per area."""
