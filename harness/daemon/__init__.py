"""The hitch daemon: one process per HITCH_ROOT that owns the ServiceManager and the run gateway (DESIGN §4 "Daemon").

``core.py`` (the manager, recovery, acquire/release), ``prepare.py`` (probe, then seal), ``runs.py`` (runs on the
daemon's gateway), ``server.py`` (the management API on a 0600 unix socket, bearer daemon token; request bodies
validated by :mod:`harness.app.requests`), ``main.py`` (the daemon process). Its files are
:class:`harness.paths.DaemonPaths`; callers reach it through :mod:`harness.app.daemon_client`. The CLI never
edits service state files; it asks the daemon.
"""
