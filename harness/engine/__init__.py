"""The one engine adapter: SGLang (DESIGN §4).

lock → exact argv (``argv.py``) + environment allow-list (``environment.py``) + per-epoch keys
(``keys.py``), put together by :func:`prepare_launch` (``sglang.py``); readiness probes (``readiness.py``)
with ``/server_info`` verification against the lock (``verify.py``).
"""

from harness.engine.argv import EngineKind, EngineProgram, engine_flags, wire_model_name
from harness.engine.environment import engine_environment
from harness.engine.keys import EngineKeys, KeyFiles, issue_keys, load_keys
from harness.engine.readiness import PROBE_OUTPUT_TOKENS, ReadinessReport, wait_ready
from harness.engine.sglang import ENGINE_LOG, EngineLaunch, owner_labels, prepare_launch
from harness.engine.verify import expected_server_info, verify_server_info

__all__ = [
    "ENGINE_LOG",
    "PROBE_OUTPUT_TOKENS",
    "EngineKeys",
    "EngineKind",
    "EngineLaunch",
    "EngineProgram",
    "KeyFiles",
    "ReadinessReport",
    "engine_environment",
    "engine_flags",
    "expected_server_info",
    "issue_keys",
    "load_keys",
    "owner_labels",
    "prepare_launch",
    "verify_server_info",
    "wait_ready",
    "wire_model_name",
]
