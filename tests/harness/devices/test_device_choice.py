"""``--device auto|cpu|cuda`` resolution (spec §5, §8.1) against doctor reports of fake machines."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.devices import DoctorReportV1, run_doctor
from harness.devices.choice import ALLOW_FLAG, choose_device
from harness.errors import HitchError
from tests.harness.devices.fakes import AMX_XEON_FLAGS, FakeDocker, FakeNvml, make_sys_tree


@pytest.fixture(autouse=True)
def _no_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")


def _report(tmp_path: Path, *, amx: bool, gpu: bool) -> DoctorReportV1:
    sys_root = make_sys_tree(tmp_path / "sys", flags=AMX_XEON_FLAGS) if amx else make_sys_tree(tmp_path / "sys")
    nvml = FakeNvml() if gpu else FakeNvml(init_error=OSError("libnvidia-ml.so.1 missing"))
    return run_doctor("auto", sys_root=sys_root, nvml=nvml, docker_factory=FakeDocker, pinned_images={"cpu": True, "cuda": True})


def test_auto_prefers_certified_cuda_then_certified_cpu(tmp_path: Path) -> None:
    both = _report(tmp_path / "a", amx=True, gpu=True)
    chosen = choose_device("auto", both, engine="sglang", allow_uncertified=False)
    assert (chosen.device, chosen.certified) == ("cuda", True)
    cpu_only = _report(tmp_path / "b", amx=True, gpu=False)
    chosen = choose_device("auto", cpu_only, engine="sglang", allow_uncertified=False)
    assert (chosen.device, chosen.certified) == ("cpu", True)
    assert chosen.to_json()["reasons"] == ["cpu is certifiable on this machine"]


def test_no_certified_backend_is_refused_naming_why_and_the_permission(tmp_path: Path) -> None:
    report = _report(tmp_path, amx=False, gpu=False)
    with pytest.raises(HitchError) as exc:
        choose_device("auto", report, engine="sglang", allow_uncertified=False)
    assert exc.value.code == "inference_backend_uncertified"
    assert ALLOW_FLAG in exc.value.message and "AMX" in exc.value.message
    assert exc.value.details["fallback"] == "cpu"
    with pytest.raises(HitchError) as explicit:
        choose_device("cpu", report, engine="sglang", allow_uncertified=False)
    assert explicit.value.code == "inference_backend_uncertified"


def test_the_permission_runs_the_uncertified_backend_and_says_so(tmp_path: Path) -> None:
    report = _report(tmp_path, amx=False, gpu=False)
    chosen = choose_device("auto", report, engine="sglang", allow_uncertified=True)
    assert (chosen.device, chosen.certified, chosen.allow_uncertified) == ("cpu", False, True)
    assert chosen.reasons[0] == f"cpu is not certified here; {ALLOW_FLAG} given"


def test_a_certifiable_machine_with_an_uncertified_runtime_needs_the_permission(tmp_path: Path) -> None:
    report = _report(tmp_path, amx=True, gpu=False)
    with pytest.raises(HitchError) as exc:
        choose_device("cpu", report, engine="sglang", allow_uncertified=False, runtime_certifiable=False)
    assert exc.value.code == "inference_backend_uncertified"


def test_the_fake_engine_needs_no_permission_and_is_never_certified(tmp_path: Path) -> None:
    report = _report(tmp_path, amx=False, gpu=False)
    chosen = choose_device("auto", report, engine="fake", allow_uncertified=False)
    assert (chosen.device, chosen.certified) == ("cpu", False)


def test_an_unknown_device_is_refused(tmp_path: Path) -> None:
    with pytest.raises(HitchError) as exc:
        choose_device("metal", _report(tmp_path, amx=False, gpu=False), engine="sglang", allow_uncertified=True)
    assert exc.value.code == "inference_device_unsupported"
