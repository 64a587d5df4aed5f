"""Doctor verdicts: this machine, fake AMX/GPU machines, the runtime catalog and selection."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.devices import DoctorReportV1, fingerprint_record, read_catalog, run_doctor
from harness.devices.docker_probe import DockerApi
from harness.runtimes.catalog import default_catalog_path
from tests.harness.devices.fakes import AMX_XEON_FLAGS, FakeDocker, FakeGpu, FakeNvml, make_sys_tree

DIGEST = "sha256:" + "ab" * 32
NO_DOCKER = "unix:///nonexistent.sock"


@pytest.fixture(autouse=True)
def _no_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_DOCKER)


def _docker(runtimes: tuple[str, ...] = ("runc", "nvidia")) -> DockerApi:
    return FakeDocker(runtimes=runtimes)


def test_this_machine_cpu_verdict_names_amx_and_cuda_names_the_driver(tmp_path: Path) -> None:
    report = run_doctor("auto", root=tmp_path / "root")
    cpu, cuda = report.devices["cpu"], report.devices["cuda"]
    if not report.cpu.amx:
        assert not cpu.certifiable
        assert any("AMX" in reason and "amx_tile" in reason for reason in cpu.reasons)
    if not report.cuda.available:
        assert not cuda.certifiable
        assert any(reason.startswith("no NVIDIA driver") for reason in cuda.reasons)
    # Docker is unreachable (DOCKER_HOST points nowhere), so neither device can be certifiable.
    assert not report.docker.reachable
    assert report.selected is None
    assert report.selected_reason.startswith("no certifiable device")
    assert "fake engine (contract)" in cpu.can_do
    assert ("generic-CPU SGLang runtime (provisional)" in cpu.can_do) == report.cpu.avx2
    DoctorReportV1.model_validate(json.loads(json.dumps(report.to_json_dict())))


def test_no_amx_desktop_is_refused_naming_amx(tmp_path: Path) -> None:
    sys_root = make_sys_tree(tmp_path / "sys")
    report = run_doctor("cpu", sys_root=sys_root, docker_factory=lambda: _docker(), pinned_images={"cpu": True})
    verdict = report.devices["cpu"]
    assert not verdict.certifiable
    assert verdict.reasons == ["CPU lacks AMX (amx_tile, amx_bf16): the SGLang CPU engine needs Intel AMX"]
    assert list(report.devices) == ["cpu"]
    assert report.selected is None


def test_amx_xeon_with_docker_and_pinned_image_is_certifiable(tmp_path: Path) -> None:
    sys_root = make_sys_tree(tmp_path / "sys", flags=AMX_XEON_FLAGS)
    report = run_doctor(
        "auto",
        sys_root=sys_root,
        nvml=FakeNvml(init_error=OSError("libnvidia-ml.so.1 missing")),
        docker_factory=lambda: _docker(runtimes=("runc",)),
        pinned_images={"cpu": True},
    )
    assert report.devices["cpu"].certifiable
    assert report.devices["cpu"].reasons == []
    assert "SGLang CPU image from the catalog (certified)" in report.devices["cpu"].can_do
    assert not report.devices["cuda"].certifiable
    assert report.selected == "cpu"


def test_amx_without_pinned_image_names_the_catalog(tmp_path: Path) -> None:
    sys_root = make_sys_tree(tmp_path / "sys", flags=AMX_XEON_FLAGS)
    catalog = _catalog_copy(tmp_path / "catalog", None)
    report = run_doctor("cpu", sys_root=sys_root, docker_factory=lambda: _docker(), catalog_path=catalog)
    assert report.devices["cpu"].reasons == ["no pinned SGLang CPU image in the runtime catalog"]


def test_amx_without_docker_names_docker(tmp_path: Path) -> None:
    sys_root = make_sys_tree(tmp_path / "sys", flags=AMX_XEON_FLAGS)
    report = run_doctor("cpu", sys_root=sys_root, pinned_images={"cpu": True})
    (reason,) = report.devices["cpu"].reasons
    assert reason.startswith(f"Docker not reachable at {NO_DOCKER}")


def test_driver_575_is_refused_naming_the_driver_with_fake_nvml() -> None:
    """Fake NVML reports driver 575 and an H200: no GPU exists here."""
    report = run_doctor("cuda", nvml=FakeNvml(driver="575.51.03"), docker_factory=lambda: _docker(), pinned_images={"cuda": True})
    verdict = report.devices["cuda"]
    assert not verdict.certifiable
    assert verdict.reasons == ["NVIDIA driver 575.51.03 is too old: CUDA 13 images need driver >= 580"]
    assert list(report.devices) == ["cuda"]
    assert report.selected is None


def test_driver_580_gpu_and_nvidia_runtime_is_certifiable_with_fake_nvml() -> None:
    """Fake NVML reports driver 580 and an H200, fake Docker has the nvidia runtime: no GPU exists here."""
    report = run_doctor("auto", nvml=FakeNvml(driver="580.65.06"), docker_factory=lambda: _docker(), pinned_images={"cuda": True})
    verdict = report.devices["cuda"]
    assert verdict.certifiable
    assert verdict.reasons == []
    assert "SGLang CUDA image from the catalog (certified)" in verdict.can_do
    assert report.selected == "cuda"
    fingerprint = fingerprint_record(report, "cuda")
    assert fingerprint.gpu_uuid == "GPU-0b3c5a1e-0000-4000-8000-000000000001"
    assert fingerprint.driver_version == "580.65.06"
    assert fingerprint.compute_capability == "9.0"


def test_auto_prefers_cuda_when_both_are_certifiable_with_fake_nvml(tmp_path: Path) -> None:
    """Fake NVML and an AMX tree: no GPU and no AMX exist here."""
    report = run_doctor(
        "auto",
        sys_root=make_sys_tree(tmp_path / "sys", flags=AMX_XEON_FLAGS),
        nvml=FakeNvml(),
        docker_factory=lambda: _docker(),
        pinned_images={"cpu": True, "cuda": True},
    )
    assert report.devices["cpu"].certifiable and report.devices["cuda"].certifiable
    assert report.selected == "cuda"


@pytest.mark.parametrize(
    ("nvml", "docker_runtimes", "expected"),
    [
        (FakeNvml(gpus=[]), ("runc", "nvidia"), "no NVIDIA GPU visible to NVML"),
        (FakeNvml(gpus=[FakeGpu(capability=(7, 0))]), ("runc", "nvidia"), "no GPU with compute capability >= 7.5"),
        (FakeNvml(), ("runc",), "Docker has no 'nvidia' runtime"),
    ],
)
def test_cuda_refusals_with_fake_nvml(nvml: FakeNvml, docker_runtimes: tuple[str, ...], expected: str) -> None:
    """Fake NVML describes the GPUs: no GPU exists here."""
    report = run_doctor("cuda", nvml=nvml, docker_factory=lambda: _docker(runtimes=docker_runtimes), pinned_images={"cuda": True})
    verdict = report.devices["cuda"]
    assert not verdict.certifiable
    assert len(verdict.reasons) == 1
    assert verdict.reasons[0].startswith(expected)


def _catalog_copy(tmp_path: Path, cpu_digest: str | None) -> Path:
    """The real catalog (and its runtime folders), with the CPU image pinned or not."""
    src = default_catalog_path()
    dst = tmp_path / "catalog"
    shutil.copytree(src.parent / "runtimes", dst / "runtimes")
    text = src.read_text()
    if cpu_digest is not None:
        text = text.replace('tag_hint = "v0.5.15.post1-xeon"', f'tag_hint = "v0.5.15.post1-xeon"\ndigest = "{cpu_digest}"')
    (dst / "runtimes.toml").write_text(text)
    return dst / "runtimes.toml"


def test_catalog_view_finds_only_certifiable_digest_pinned_images(tmp_path: Path) -> None:
    assert not read_catalog(_catalog_copy(tmp_path / "a", None)).has_pinned("cpu")
    view = read_catalog(_catalog_copy(tmp_path / "b", DIGEST))
    assert view.has_pinned("cpu")
    assert not view.has_pinned("cuda")  # the CUDA image stays unpinned
    assert view.problem is None


def test_python_env_runtime_is_not_an_image(tmp_path: Path) -> None:
    # The generic-CPU runtime is pinned (hash lock) but is no certifiable image; the CUDA one is certifiable.
    view = read_catalog(_catalog_copy(tmp_path, None))
    assert view.pinned == {}
    assert view.python_env == {"cuda": True}


def test_cuda_python_env_runtime_is_certifiable_without_docker_with_fake_nvml(tmp_path: Path) -> None:
    """Fake NVML describes an H200 (no GPU here); no Docker at all: the python-env CUDA runtime suffices."""

    def no_docker() -> FakeDocker:
        raise ConnectionError("no Docker on this GPU machine")

    report = run_doctor("cuda", nvml=FakeNvml(), docker_factory=no_docker, catalog_path=_catalog_copy(tmp_path, None))
    verdict = report.devices["cuda"]
    assert verdict.certifiable and verdict.reasons == [], verdict.reasons
    assert "certifiable CUDA python-env runtime from the catalog (process launcher, certified)" in verdict.can_do
    assert report.selected == "cuda"
    # without a driver the runtime does not help: the GPU reason stays
    no_driver = run_doctor("cuda", nvml=FakeNvml(init_error=RuntimeError("x")), catalog_path=_catalog_copy(tmp_path / "b", None))
    assert not no_driver.devices["cuda"].certifiable
    assert no_driver.devices["cuda"].reasons[0].startswith("no NVIDIA driver")


def test_unreadable_catalog_is_named_in_the_reason(tmp_path: Path) -> None:
    catalog = tmp_path / "runtimes.toml"
    catalog.write_text("this is = = not toml")
    sys_root = make_sys_tree(tmp_path / "sys", flags=AMX_XEON_FLAGS)
    report = run_doctor("cpu", sys_root=sys_root, docker_factory=lambda: _docker(), catalog_path=catalog)
    (reason,) = report.devices["cpu"].reasons
    assert reason.startswith("no pinned SGLang CPU image in the runtime catalog (runtime catalog")
    assert "unreadable" in reason


def test_report_json_schema_exports() -> None:
    schema = DoctorReportV1.model_json_schema()
    assert schema["additionalProperties"] is False
    assert {"host", "cpu", "cuda", "docker", "devices", "selected"} <= set(schema["properties"])
