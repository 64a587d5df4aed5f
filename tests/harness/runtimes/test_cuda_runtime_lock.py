"""The committed lock of the CUDA runtime ``sglang-0.5.23-cuda``: format, hashes and the real CUDA stack.

Installing it needs ~4.4 GB of wheels and a GPU to be of any use, so it is installed by
``scripts/device/cuda_certify.sh`` on a GPU machine; here the lock itself is checked.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from harness.runtimes import get_runtime
from harness.runtimes.catalog import check_requirements, requirements_pin_engine, runtime_source_dir

REPO = Path(__file__).resolve().parents[3]
CUDA = "sglang-0.5.23-cuda"


def _pins() -> dict[str, str]:
    text = (runtime_source_dir(CUDA) / "requirements.lock").read_text()
    found = re.findall(r"^([a-z0-9][a-z0-9._-]*)==(\S+) \\\n    --hash=sha256:([0-9a-f]{64})$", text, re.M)
    assert len(found) == check_requirements(text, CUDA)  # one sha256 per package, nothing else
    names = [name for name, _, _ in found]
    assert len(names) == len(set(names))
    return {name: version for name, version, _ in found}


def _resolver() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "resolve_runtime_requirements", REPO / "scripts" / "resolve_runtime_requirements.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_cuda_lock_pins_the_real_cuda_stack_by_hash() -> None:
    pins = _pins()
    assert pins["sglang"] == "0.5.23"
    assert pins["sglang-kernel"] == "0.4.10"
    assert pins["flashinfer-python"] == "0.7.2"
    assert pins["torch"] == "2.14.1"  # the index's CUDA build: no local "+cpu" label
    assert not [f"{n}=={v}" for n, v in pins.items() if "+" in v]
    for cuda13 in ("nvidia-cudnn-cu13", "nvidia-nccl-cu13", "nvidia-cuda-runtime", "nvidia-cublas", "cuda-python", "triton"):
        assert cuda13 in pins, cuda13
    assert len(pins) > 150


def test_cuda_lock_pins_the_engine_wheel_so_the_runtime_is_certifiable() -> None:
    text = (runtime_source_dir(CUDA) / "requirements.lock").read_text()
    assert requirements_pin_engine(text, "sglang", "0.5.23")
    assert not requirements_pin_engine(text, "sglang", "0.5.22")
    runtime = get_runtime(CUDA)
    assert runtime.certifiable and runtime.pinned and runtime.engine_commit is None


def test_cuda_lock_covers_every_input_of_the_resolver() -> None:
    pins = _pins()
    resolver = _resolver()
    inputs = (runtime_source_dir(CUDA) / "requirements.in").read_text().split("\n")
    wanted = [line for line in inputs if line and not line.startswith("#")]
    spec = resolver.RUNTIMES[CUDA]
    assert wanted == [resolver.SGLANG, *spec.torch, *spec.extra_inputs]
    for req in wanted:
        name, _, version = re.sub(r"\[.*\]", "", req).partition("==")
        assert pins[resolver.norm(name)] == version, req


def test_resolver_sums_each_wheel_size_once(tmp_path: Path) -> None:
    log = tmp_path / "pip.log"
    log.write_text(
        "  Downloading torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl (554.6 MB)\n"
        "  Downloading mdurl-0.1.2-py3-none-any.whl (10.0 kB)\n"
        "  Downloading mdurl-0.1.2-py3-none-any.whl (10.0 kB)\n"
        "  Downloading tiny-1.0-py3-none-any.whl (512 bytes)\n"
    )
    assert _resolver().wheel_bytes(log) == 554_600_000 + 10_000 + 512
