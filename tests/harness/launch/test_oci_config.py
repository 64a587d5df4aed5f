"""The OCI launcher's create kwargs and image pinning (`harness.launch.oci_config`, the module under test), as data
(no Docker engine needed)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from docker.types import DeviceRequest

from harness.contracts.lock import ResourceVectorV1
from harness.engine.launch_spec import LaunchSpec
from harness.errors import HitchError
from harness.launch import oci_config
from harness.launch.oci import OciLauncher

IMAGE_ID = "sha256:" + "ab" * 32
INFERENCE_ID = "sha256:" + "cd" * 32


def _spec(tmp_path: Path, **over: object) -> LaunchSpec:
    base: dict[str, object] = {
        "service_id": "svc-1",
        "epoch": 3,
        "inference_id": INFERENCE_ID,
        "argv": ["python3", "-m", "sglang.launch_server", "--port", "30000"],
        "env": {"SGLANG_USE_CPU_ENGINE": "1"},
        "host": "0.0.0.0",
        "port": 30000,
        "model_dir": tmp_path / "model",
        "log_path": tmp_path / "engine.log",
        "device": "cpu",
        "resources": ResourceVectorV1(
            cpu_cores=2, memory_bytes=1 << 30, shm_bytes=1 << 26, gpu_count=0, gpu_memory_bytes=0, disk_bytes=0
        ),
        "image": IMAGE_ID,
    }
    base.update(over)
    return LaunchSpec(**base)  # type: ignore[arg-type]


def _kwargs(tmp_path: Path, spec: LaunchSpec) -> dict[str, object]:
    return oci_config.container_kwargs(
        spec,
        image_id=IMAGE_ID,
        labels=oci_config.owner_labels(tmp_path, spec),
        network="n",
        name="n",
        options=oci_config.ContainerOptions(),
    )


@pytest.mark.parametrize(
    "ref",
    [IMAGE_ID, "lmsysorg/sglang@sha256:" + "0f" * 32, "registry.example:5000/a/b@sha256:" + "12" * 32],
)
def test_pinned_image_references_accepted(ref: str) -> None:
    assert oci_config.require_pinned_image(ref) == ref


@pytest.mark.parametrize(
    "ref", [None, "hitch/fake-sglang:dev", "lmsysorg/sglang:latest", "sha256:abc", "ubuntu", "x@sha256:" + "g" * 64]
)
def test_tag_or_partial_reference_refused_as_unpinned(ref: str | None) -> None:
    with pytest.raises(HitchError) as err:
        oci_config.require_pinned_image(ref)
    assert err.value.code == "inference_runtime_unpinned"


def test_launcher_refuses_a_tag_before_touching_docker(tmp_path: Path) -> None:
    launcher = OciLauncher(tmp_path, client=object())  # type: ignore[arg-type]  # never called
    with pytest.raises(HitchError) as err:
        asyncio.run(launcher.start(_spec(tmp_path, image="hitch/fake-sglang:dev")))
    assert err.value.code == "inference_runtime_unpinned"


def test_security_and_resource_settings(tmp_path: Path) -> None:
    kw = _kwargs(tmp_path, _spec(tmp_path))
    assert kw["mem_limit"] == 1 << 30
    assert kw["memswap_limit"] == 1 << 30
    assert kw["nano_cpus"] == 2_000_000_000
    assert kw["shm_size"] == 1 << 26
    assert kw["init"] is True
    assert kw["cap_drop"] == ["ALL"]
    assert kw["security_opt"] == ["no-new-privileges"]
    assert kw["read_only"] is True
    assert set(kw["tmpfs"]) == {"/tmp"}  # type: ignore[arg-type]
    assert kw["entrypoint"] == ["python3"]
    assert kw["command"] == ["-m", "sglang.launch_server", "--port", "30000"]
    assert kw["environment"] == {"SGLANG_USE_CPU_ENGINE": "1"}
    assert "device_requests" not in kw
    assert "ports" not in kw  # publishing is dropped on internal networks; the host uses the container IP


def test_checkpoint_and_secret_files_are_read_only_mounts(tmp_path: Path) -> None:
    secret = tmp_path / "engine.key"
    kw = _kwargs(tmp_path, _spec(tmp_path, secret_files={"/run/hitch/engine.key": secret}))
    mounts = {m["Target"]: m for m in kw["mounts"]}  # type: ignore[attr-defined]
    assert mounts[str(tmp_path / "model")]["Source"] == str(tmp_path / "model")
    assert mounts["/run/hitch/engine.key"]["Source"] == str(secret)
    assert all(m["ReadOnly"] for m in mounts.values())


def test_cuda_by_gpu_uuid_without_gpu_inspects_kwargs(tmp_path: Path) -> None:
    uuid = "GPU-8f2c3c1e-1111-2222-3333-444455556666"
    kw = _kwargs(tmp_path, _spec(tmp_path, device="cuda", gpu_uuid=uuid))
    (request,) = kw["device_requests"]  # type: ignore[misc]
    assert isinstance(request, DeviceRequest)
    assert request["DeviceIDs"] == [uuid]
    assert request["Capabilities"] == [["gpu"]]
    assert request["Count"] == 0  # exactly the named device, never "all"


def test_cuda_without_uuid_refused(tmp_path: Path) -> None:
    with pytest.raises(HitchError) as err:
        _kwargs(tmp_path, _spec(tmp_path, device="cuda"))
    assert err.value.code == "inference_device_unsupported"


def test_memory_limit_required(tmp_path: Path) -> None:
    res = ResourceVectorV1(cpu_cores=1, memory_bytes=0, shm_bytes=0, gpu_count=0, gpu_memory_bytes=0, disk_bytes=0)
    with pytest.raises(HitchError) as err:
        _kwargs(tmp_path, _spec(tmp_path, resources=res))
    assert err.value.code == "inference_lock_invalid"


def test_ownership_labels_win_over_spec_labels(tmp_path: Path) -> None:
    # The label names are spelled out, not imported: containers an earlier hitch left behind carry them.
    spec = _spec(tmp_path, labels={"dev.hitch.root": "forged", "team": "x"})
    assert oci_config.owner_labels(tmp_path, spec) == {
        "team": "x",
        "dev.hitch.root": oci_config.root_label(tmp_path),
        "dev.hitch.service": "svc-1",
        "dev.hitch.epoch": "3",
        "dev.hitch.inference_id": INFERENCE_ID,
    }


def test_root_label_is_path_hash_and_network_names_unique(tmp_path: Path) -> None:
    assert oci_config.root_label(tmp_path) == oci_config.root_label(tmp_path / "." / "sub" / "..")
    assert oci_config.root_label(tmp_path) != oci_config.root_label(tmp_path / "other")
    spec = _spec(tmp_path)
    assert oci_config.network_name(tmp_path, spec) != oci_config.network_name(tmp_path, spec)


def test_the_engines_home_is_a_private_tmpfs_in_the_container(tmp_path: Path) -> None:
    home = str(tmp_path / "private" / "home")
    spec = _spec(tmp_path, env={"HOME": home, "SGLANG_USE_CPU_ENGINE": "1"})
    kw = oci_config.container_kwargs(
        spec, image_id=IMAGE_ID, labels={}, network="n", name="n", options=oci_config.ContainerOptions(user="1000:1001")
    )
    assert kw["tmpfs"][home] == "rw,nosuid,nodev,size=536870912,mode=0700,uid=1000,gid=1001"  # type: ignore[index]
    assert kw["tmpfs"]["/tmp"] == "rw,nosuid,nodev,size=536870912"  # type: ignore[index]
    assert not any(m["Target"] == home for m in kw["mounts"])  # type: ignore[attr-defined]  # never the host dir
