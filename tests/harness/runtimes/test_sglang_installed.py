"""Integration: the real generic-CPU SGLang runtime installed under $HITCH_ROOT imports its server.

Skipped when the runtime is not installed there, unless HITCH_REQUIRE_SGLANG=1 (then it fails).
Install it with ``hitch runtime install sglang-0.5.23-cpu-generic``.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.runtimes import SERVER_MODULE, get_runtime
from tests.components import installed_sglang
from tests.harness.runtimes.conftest import GENERIC

pytestmark = [pytest.mark.integration, pytest.mark.needs_sglang]


def test_installed_runtime_imports_the_sglang_server_with_the_shim() -> None:
    runtime = installed_sglang()
    manifest = get_runtime(GENERIC)
    code = (
        f"import json, sgl_kernel, sglang, torch, {SERVER_MODULE}\n"
        "print(json.dumps([sglang.__version__, torch.__version__, sgl_kernel.SHIM, sgl_kernel.__file__]))"
    )
    proc = subprocess.run(
        [str(runtime.python), "-c", code], capture_output=True, text=True, env=runtime.launch_environ(), timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sglang_version, torch_version, shim, shim_file = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sglang_version == manifest.engine_version
    assert torch_version.split("+")[0] == manifest.torch_version
    assert shim is True
    assert shim_file.startswith(str(runtime.path / "files" / "shim"))
