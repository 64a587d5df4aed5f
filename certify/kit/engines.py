"""Real SGLang as a bare engine process (parity, benchmarks, process faults): the installed generic-CPU runtime.

:func:`sglang_command` is how :func:`fixtures.fake_sglang.parity_engines.launch_engine` runs real SGLang: the
runtime's own venv python with ``-m sglang.launch_server`` and the runtime's launch environment.
"""

from __future__ import annotations

import os

from fixtures.fake_sglang.parity_engines import EngineCommand
from harness.paths import HitchRoot
from harness.runtimes import get_runtime, installed_runtime

__all__ = ["CPU_GENERIC_RUNTIME", "sglang_command"]

CPU_GENERIC_RUNTIME = "sglang-0.5.23-cpu-generic"


def sglang_command(root: HitchRoot | None = None) -> EngineCommand | None:
    """The installed generic-CPU SGLang runtime under ``root`` (default: HITCH_ROOT), or ``None`` when it is not installed."""
    found = installed_runtime(root or HitchRoot.at(), get_runtime(CPU_GENERIC_RUNTIME))
    if found is None:
        return None
    env = found.launch_environ({**os.environ, "PYTHONUNBUFFERED": "1"})
    return EngineCommand("sglang", found.launch_argv(), env)
