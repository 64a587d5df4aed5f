"""The application layer: what every entry point (the CLI, the daemon, the certify session, ``hitch bench``,
``hitch eval``) calls, so none of them assembles the core itself.

- ``daemon_client.py``: the way into a root's daemon (start, stop, status, and each route of its API);
- ``run_store.py``: the durable run records of a root (``runs/<id>/run.json``).
"""
