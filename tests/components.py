"""Components a test may need that a machine may lack (real SGLang, Docker, Chromium, Codex, Harbor).

One rule for all of them: a missing component skips the test with the reason, unless CI set
``HITCH_REQUIRE_<COMPONENT>`` (``.ci/run`` sets them all), which turns the skip into a failure — never a
silent skip of something CI is meant to run.
"""

from __future__ import annotations

from certify.components import missing
from certify.kit.engines import CPU_GENERIC_RUNTIME, sglang_command
from fixtures.fake_sglang.parity_engines import EngineCommand
from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.runtimes import InstalledRuntime, get_runtime, installed_runtime

__all__ = ["CPU_GENERIC_RUNTIME", "installed_sglang", "missing", "sglang_engine_command"]


def installed_sglang(root: HitchRoot | None = None) -> InstalledRuntime:
    """The generic-CPU SGLang runtime installed under HITCH_ROOT (``make runtime``), or skip/fail."""
    where = root or HitchRoot.at()
    try:
        found = installed_runtime(where, get_runtime(CPU_GENERIC_RUNTIME))
    except HitchError as exc:
        missing("sglang", f"{CPU_GENERIC_RUNTIME} is unusable: {exc.code}: {exc.message}")
    if found is None:
        missing("sglang", f"{CPU_GENERIC_RUNTIME} is not installed under {where.path} (make runtime)")
    return found


def sglang_engine_command() -> EngineCommand:
    """How to execute real SGLang beside the fake with identical flags, or skip/fail."""
    installed_sglang()
    command = sglang_command()
    assert command is not None  # installed_sglang() found it
    return command
