"""The one device rule (spec §5, §8.1): ``--device auto|cpu|cuda|metal``, the engine, launcher and runtime, resolved
against doctor reports of fake machines and the shipped runtime catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.app.choice import ALLOW_FLAG, resolve_choice
from harness.app.spec import ServiceSpec
from harness.contracts.runtime import InferenceRuntimeManifestV1
from harness.devices import DoctorReportV1, run_doctor
from harness.errors import HitchError
from harness.runtimes import load_catalog
from tests.harness.devices.fakes import AMX_XEON_FLAGS, FakeDocker, FakeNvml, make_sys_tree

CPU_IMAGE = "sglang-0.5.15.post1-cpu"  # unpinned in the shipped catalog: an operator pins it
GENERIC = "sglang-0.5.23-cpu-generic"
CUDA_ENV = "sglang-0.5.23-cuda"
CLI = {"engine": "sglang", "launcher": "process"}  # an engine and launcher given (--engine sglang --launcher process)


@pytest.fixture(autouse=True)
def _no_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")


def _report(tmp_path: Path, *, amx: bool, gpu: bool) -> DoctorReportV1:
    sys_root = make_sys_tree(tmp_path / "sys", flags=AMX_XEON_FLAGS) if amx else make_sys_tree(tmp_path / "sys")
    nvml = FakeNvml() if gpu else FakeNvml(init_error=OSError("libnvidia-ml.so.1 missing"))
    return run_doctor("auto", sys_root=sys_root, nvml=nvml, docker_factory=FakeDocker, pinned_images={"cpu": True, "cuda": True})


def _pinned_cpu_image() -> list[InferenceRuntimeManifestV1]:
    """The shipped catalog with the CPU image pinned by digest and certifiable, as an operator's pin makes it."""
    out = []
    for runtime in load_catalog(operator_pins=False):
        if runtime.name == CPU_IMAGE:
            package = runtime.package.model_copy(update={"digest": "sha256:" + "a" * 64})
            runtime = runtime.model_copy(update={"package": package, "pinned": True, "certifiable": True})
        out.append(runtime)
    return out


def test_auto_prefers_certified_cuda_then_certified_cpu(tmp_path: Path) -> None:
    both = _report(tmp_path / "a", amx=True, gpu=True)
    chosen = resolve_choice(ServiceSpec(**CLI), doctor=both, catalog=_pinned_cpu_image())
    assert (chosen.device, chosen.certified, chosen.runtime_name) == ("cuda", True, CUDA_ENV)
    cpu_only = _report(tmp_path / "b", amx=True, gpu=False)
    chosen = resolve_choice(ServiceSpec(engine="sglang", launcher="oci"), doctor=cpu_only, catalog=_pinned_cpu_image())
    assert (chosen.device, chosen.certified, chosen.runtime_name) == ("cpu", True, CPU_IMAGE)
    assert chosen.device_choice().model_dump()["reasons"] == ["cpu is certifiable on this machine"]
    assert chosen.require() is chosen


def test_no_certified_backend_is_refused_naming_why_and_the_permission(tmp_path: Path) -> None:
    report = _report(tmp_path, amx=False, gpu=False)
    with pytest.raises(HitchError) as exc:
        resolve_choice(ServiceSpec(**CLI), doctor=report).require()
    assert exc.value.code == "inference_backend_uncertified"
    assert ALLOW_FLAG in exc.value.message and "AMX" in exc.value.message
    assert exc.value.details["fallback"] == "cpu"
    with pytest.raises(HitchError) as explicit:
        resolve_choice(ServiceSpec(device="cpu", **CLI), doctor=report).require()
    assert explicit.value.code == "inference_backend_uncertified"


def test_the_permission_runs_the_uncertified_backend_and_says_so(tmp_path: Path) -> None:
    report = _report(tmp_path, amx=False, gpu=False)
    chosen = resolve_choice(ServiceSpec(allow_uncertified=True, **CLI), doctor=report).require()
    assert (chosen.device, chosen.certified, chosen.allow_uncertified) == ("cpu", False, True)
    assert chosen.reasons[0] == f"cpu is not certified here; {ALLOW_FLAG} given"
    assert chosen.basis.endswith(f"uncertified backend allowed ({ALLOW_FLAG})")
    assert chosen.device_argv() == ["--device", "cpu", ALLOW_FLAG]


def test_a_certifiable_machine_with_an_uncertified_runtime_needs_the_permission(tmp_path: Path) -> None:
    report = _report(tmp_path, amx=True, gpu=False)
    chosen = resolve_choice(ServiceSpec(device="cpu", runtime=GENERIC, **CLI), doctor=report)
    assert chosen.refusal is not None and chosen.refusal.code == "inference_backend_uncertified"
    assert f"runtime {GENERIC} is not certifiable" in chosen.refusal.message
    with pytest.raises(HitchError):
        chosen.require()


def test_the_fake_engine_needs_no_permission_and_is_never_certified(tmp_path: Path) -> None:
    report = _report(tmp_path, amx=False, gpu=False)
    chosen = resolve_choice(ServiceSpec(engine="fake"), doctor=report).require()
    assert (chosen.device, chosen.certified, chosen.launcher) == ("cpu", False, "process")
    assert chosen.reasons[0] == "fake engine: a contract run, never certified"


@pytest.mark.parametrize("device", ["metal", "tpu"])
def test_an_unserved_device_is_refused(tmp_path: Path, device: str) -> None:
    report = _report(tmp_path, amx=False, gpu=False)
    with pytest.raises(HitchError) as exc:
        resolve_choice(ServiceSpec(device=device, allow_uncertified=True, **CLI), doctor=report)
    assert exc.value.code == "inference_device_unsupported"


def test_cuda_without_a_usable_gpu_fails_closed_even_with_the_permission(tmp_path: Path) -> None:
    report = _report(tmp_path, amx=False, gpu=False)
    chosen = resolve_choice(ServiceSpec(device="cuda", allow_uncertified=True), doctor=report)
    assert (chosen.device, chosen.engine) == ("cuda", "sglang")  # never the fake engine, never the CPU
    assert chosen.refusal is not None and chosen.refusal.code == "inference_device_unsupported"
    assert chosen.refusal.message.startswith("--device cuda cannot run on this machine: ")
    assert chosen.runtime_name == CUDA_ENV  # a blocked session still names what it would have run
    fake = resolve_choice(ServiceSpec(device="cuda", engine="fake"), doctor=report)
    assert fake.refusal is None and fake.device == "cuda"  # a contract run needs no GPU


def test_without_an_engine_given_the_best_the_machine_runs_is_chosen(tmp_path: Path) -> None:
    plain = _report(tmp_path / "a", amx=False, gpu=False)
    chosen = resolve_choice(ServiceSpec(device="cpu", allow_uncertified=True), doctor=plain)
    assert (chosen.engine, chosen.launcher, chosen.runtime_name) == ("sglang", "process", GENERIC)
    assert "installed on demand" in chosen.basis
    no_env = [r for r in load_catalog(operator_pins=False) if r.package.kind != "python-env"]
    fake = resolve_choice(ServiceSpec(device="cpu"), doctor=plain, catalog=no_env)
    assert (fake.engine, fake.launcher, fake.refusal) == ("fake", "process", None)
    amx = _report(tmp_path / "b", amx=True, gpu=False)
    image = resolve_choice(ServiceSpec(device="cpu"), doctor=amx, catalog=_pinned_cpu_image())
    assert (image.engine, image.launcher, image.runtime_name, image.certified) == ("sglang", "oci", CPU_IMAGE, True)
    assert image.basis == "certifiable platform, Docker, pinned image"


def test_auto_with_a_runtime_given_takes_the_runtimes_device(tmp_path: Path) -> None:
    report = _report(tmp_path, amx=False, gpu=True)
    chosen = resolve_choice(ServiceSpec(runtime=GENERIC, allow_uncertified=True, **CLI), doctor=report).require()
    assert (chosen.device, chosen.runtime_name) == ("cpu", GENERIC)
    with pytest.raises(HitchError) as exc:
        resolve_choice(ServiceSpec(runtime="no-such-runtime", **CLI), doctor=report)
    assert exc.value.code == "inference_runtime_not_found"
