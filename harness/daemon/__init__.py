"""The hitch daemon: one process per HITCH_ROOT that owns the ServiceManager (DESIGN §4 "Daemon").

``paths.py`` (where its socket, token, pid and log live), ``core.py`` (the manager, recovery, prepare),
``server.py`` (the management API on a 0600 unix socket, bearer daemon token), ``main.py`` (the
daemon process), ``client.py`` (the CLI's and in-process callers' way in: start/stop/status, acquire,
release, prepare). The CLI never edits service state files; it asks the daemon.
"""

from harness.daemon.client import DaemonClient, daemon_running, ensure_daemon, start_daemon, stop_daemon
from harness.daemon.paths import DaemonPaths

__all__ = ["DaemonClient", "DaemonPaths", "daemon_running", "ensure_daemon", "start_daemon", "stop_daemon"]
