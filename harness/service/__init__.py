"""Inference services: one supervised engine per service (``supervisor.py``) and its on-disk record
(``state_store.py``). The manager, leases and recovery build on these."""

from harness.service.state_store import EVENTS_FILE, STATE_FILE, ServiceStateStore
from harness.service.supervisor import FailureCallback, ReleaseCallback, ServiceEndpoint, ServiceSupervisor

__all__ = [
    "EVENTS_FILE",
    "STATE_FILE",
    "FailureCallback",
    "ReleaseCallback",
    "ServiceEndpoint",
    "ServiceStateStore",
    "ServiceSupervisor",
]
