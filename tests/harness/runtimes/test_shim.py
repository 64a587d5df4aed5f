"""The sgl_kernel shim: every import form SGLang uses works; every name raises when called.

Each check runs in a fresh interpreter with ``-B`` (no ``__pycache__`` in the catalog) and the
shim folder on PYTHONPATH, exactly as the runtime puts it there.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.runtimes import runtime_source_dir
from tests.harness.runtimes.conftest import GENERIC

SHIM_DIR = runtime_source_dir(GENERIC) / "shim"


def _py(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SHIM_DIR), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-B", "-c", code], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize(
    "statement",
    [
        "import sgl_kernel",
        "from sgl_kernel import rmsnorm, fused_add_rmsnorm, silu_and_mul",
        "from sgl_kernel.flash_attn import flash_attn_varlen_func",
        "import sgl_kernel.common_ops",
        "import sgl_kernel.allreduce as custom_ar",
        "from sgl_kernel.kvcacheio import transfer_kv_all_layer",
        "from sgl_kernel.scalar_type import ScalarType, scalar_types; scalar_types.uint4b8",
        "import sgl_kernel.deep.nested.module; sgl_kernel.deep.nested.module.op",
    ],
)
def test_import_forms_work(statement: str) -> None:
    proc = _py(statement + "\nimport sgl_kernel; assert sgl_kernel.SHIM is True; print('ok')")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.parametrize(
    ("call", "name"),
    [
        ("from sgl_kernel import rmsnorm; rmsnorm(1, 2)", "sgl_kernel.rmsnorm"),
        ("import sgl_kernel; sgl_kernel.top_k_renorm_prob(x=1)", "sgl_kernel.top_k_renorm_prob"),
        ("from sgl_kernel.flash_attn import flash_attn_with_kvcache as f; f()", "sgl_kernel.flash_attn.flash_attn_with_kvcache"),
        ("import sgl_kernel.common_ops; sgl_kernel.common_ops.gemm()", "sgl_kernel.common_ops.gemm"),
        (
            "from sgl_kernel.scalar_type import scalar_types; scalar_types.uint4b8()",
            "sgl_kernel.scalar_type.scalar_types.uint4b8",
        ),
    ],
)
def test_calling_any_name_raises_not_implemented_naming_it(call: str, name: str) -> None:
    proc = _py(f"try:\n    {call}\nexcept NotImplementedError as e:\n    print(e)\nelse:\n    print('no error')")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"sgl_kernel shim: {name} called"


def test_dunder_lookups_stay_attribute_errors() -> None:
    proc = _py("import sgl_kernel\nprint(hasattr(sgl_kernel, '__all__'), hasattr(sgl_kernel.rmsnorm, '__wrapped__'))")
    assert proc.stdout.strip() == "False False", proc.stderr


def test_other_top_level_names_are_not_captured() -> None:
    proc = _py("import sgl_kernel\ntry:\n    import sgl_kernel_npu\nexcept ImportError:\n    print('absent')")
    assert proc.stdout.strip() == "absent", proc.stderr


def test_running_the_shim_leaves_no_bytecode_in_the_catalog() -> None:
    assert not list(SHIM_DIR.rglob("__pycache__"))
