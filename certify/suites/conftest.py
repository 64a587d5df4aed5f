"""The fixtures several suite modules share, registered once here (the kit modules own what they make).

``private_daemon`` (:mod:`certify.kit.daemon`: one per test process and engine, for the faults and lifecycle
checks that kill or refuse an engine), ``engine_proxy`` and ``fault_site`` (:mod:`certify.kit.faults`:
where a network or output fault runs).
"""

from certify.kit.daemon import private_daemon_fixture
from certify.kit.faults import engine_proxy_fixture, fault_site_fixture

__all__ = ["engine_proxy_fixture", "fault_site_fixture", "private_daemon_fixture"]
