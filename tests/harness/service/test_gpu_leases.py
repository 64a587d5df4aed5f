"""GPU leases by UUID, shared by all roots of a user.

No GPU exists on the machines these tests run on: every test uses a fake device provider that
returns made-up UUIDs, which is all the lease logic needs.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.service.gpu_leases import GpuLeaseRecordV1, GpuLeases, default_lease_dir, process_start_time
from harness.service.ledger import ResourceLedger
from harness.service.manager import ServiceManager
from tests.harness.service.manager_fakes import BIG, FakeStarter, make_lock, run

GPU_A = "GPU-00000000-0000-0000-0000-00000000000a"
GPU_B = "GPU-00000000-0000-0000-0000-00000000000b"


class FakeGpuProvider:
    def __init__(self, *uuids: str) -> None:
        self.uuids = list(uuids)

    def gpu_uuids(self) -> list[str]:
        return list(self.uuids)


def _leases(tmp_path: Path, root: str, *uuids: str) -> GpuLeases:
    return GpuLeases(FakeGpuProvider(*uuids), tmp_path / root, lease_dir=tmp_path / "gpu-leases", clock=lambda: 42.0)


def _dead_pid() -> tuple[int, float]:
    """A PID and start time of a process that has exited by the time this returns."""
    child = subprocess.Popen(["sleep", "30"])
    started = process_start_time(child.pid)
    assert started is not None
    child.kill()
    child.wait()
    return child.pid, started


def test_two_roots_cannot_lease_the_same_uuid_with_fake_gpu_provider(tmp_path: Path) -> None:
    """No GPU here: the provider is fake. Root A holds the only GPU; root B is refused until A releases."""
    a = _leases(tmp_path, "root-a", GPU_A)
    b = _leases(tmp_path, "root-b", GPU_A)
    assert a.acquire("svc-a") == GPU_A
    with pytest.raises(HitchError) as info:
        b.acquire("svc-b")
    assert info.value.code == "inference_capacity_exceeded"
    assert info.value.details["held"] == [{"uuid": GPU_A, "root": str(tmp_path / "root-a"), "service_id": "svc-a"}]
    assert b.release(GPU_A, service_id="svc-a") is False  # not B's lease
    assert a.release(GPU_A, service_id="svc-a") is True
    assert b.acquire("svc-b") == GPU_A


def test_lease_file_holds_the_record_and_is_private_with_fake_gpu_provider(tmp_path: Path) -> None:
    """No GPU here: the provider is fake."""
    leases = _leases(tmp_path, "root-a", GPU_A, GPU_B)
    assert leases.acquire("svc-1") == GPU_A
    assert leases.acquire("svc-2") == GPU_B
    path = tmp_path / "gpu-leases" / f"{GPU_A}.json"
    record = GpuLeaseRecordV1.model_validate(json.loads(path.read_text()))
    assert (record.root, record.service_id, record.pid, record.acquired_at) == (
        str(tmp_path / "root-a"),
        "svc-1",
        os.getpid(),
        42.0,
    )
    assert record.pid_start_time == process_start_time(os.getpid())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "gpu-leases").stat().st_mode) == 0o700
    assert [s.state for s in leases.status()] == ["held", "held"]
    with pytest.raises(HitchError) as info:
        leases.acquire("svc-3")
    assert info.value.code == "inference_capacity_exceeded"


def test_a_dead_holder_quarantines_the_device_until_forced_with_fake_gpu_provider(tmp_path: Path) -> None:
    """No GPU here: the provider is fake. A lease whose PID died is never freed by that alone."""
    leases = _leases(tmp_path, "root-a", GPU_A)
    pid, started = _dead_pid()
    stale = GpuLeaseRecordV1(
        uuid=GPU_A, root="/elsewhere", service_id="svc-old", pid=pid, pid_start_time=started, acquired_at=1.0
    )
    (tmp_path / "gpu-leases").mkdir(mode=0o700)
    lease_file = tmp_path / "gpu-leases" / f"{GPU_A}.json"
    lease_file.write_text(json.dumps(stale.to_json_dict()))

    assert [s.state for s in leases.status()] == ["stale"]
    with pytest.raises(HitchError) as info:
        leases.acquire("svc-new")
    assert info.value.code == "inference_recovery_ambiguous"
    assert info.value.details["quarantined"] == [GPU_A]
    assert leases.release(GPU_A) is False  # not ours: only a forced release frees it
    assert lease_file.exists()

    assert leases.release(GPU_A, force=True) is True
    assert not lease_file.exists()
    assert leases.acquire("svc-new") == GPU_A


def test_a_reused_pid_is_not_mistaken_for_the_holder_with_fake_gpu_provider(tmp_path: Path) -> None:
    """No GPU here: the provider is fake. Same PID, different start time → a different process → stale."""
    leases = _leases(tmp_path, "root-a", GPU_A)
    own_start = process_start_time(os.getpid())
    assert own_start is not None
    reused = GpuLeaseRecordV1(
        uuid=GPU_A, root="/elsewhere", service_id="svc-old", pid=os.getpid(), pid_start_time=own_start - 1000, acquired_at=1.0
    )
    (tmp_path / "gpu-leases").mkdir(mode=0o700)
    (tmp_path / "gpu-leases" / f"{GPU_A}.json").write_text(json.dumps(reused.to_json_dict()))
    with pytest.raises(HitchError) as info:
        leases.acquire("svc-new")
    assert info.value.code == "inference_recovery_ambiguous"


def test_an_unreadable_lease_quarantines_the_device_with_fake_gpu_provider(tmp_path: Path) -> None:
    """No GPU here: the provider is fake."""
    leases = _leases(tmp_path, "root-a", GPU_A)
    (tmp_path / "gpu-leases").mkdir(mode=0o700)
    (tmp_path / "gpu-leases" / f"{GPU_A}.json").write_text("{not json")
    with pytest.raises(HitchError) as info:
        leases.acquire("svc-new")
    assert info.value.code == "inference_recovery_ambiguous"
    assert leases.release(GPU_A, force=True) is True
    assert leases.acquire("svc-new") == GPU_A


def test_a_free_device_is_used_when_another_is_quarantined_with_fake_gpu_provider(tmp_path: Path) -> None:
    """No GPU here: the provider is fake."""
    leases = _leases(tmp_path, "root-a", GPU_A, GPU_B)
    (tmp_path / "gpu-leases").mkdir(mode=0o700)
    (tmp_path / "gpu-leases" / f"{GPU_A}.json").write_text("{not json")
    assert leases.acquire("svc-new") == GPU_B


def test_unknown_or_malformed_uuids_are_refused_with_fake_gpu_provider(tmp_path: Path) -> None:
    """No GPU here: the provider is fake."""
    leases = _leases(tmp_path, "root-a", GPU_A)
    with pytest.raises(HitchError) as unknown:
        leases.acquire("svc", uuid=GPU_B)
    assert unknown.value.code == "inference_device_unsupported"
    with pytest.raises(HitchError) as bad:
        leases.release("../escape", force=True)
    assert bad.value.code == "usage_error"


def test_no_gpu_at_all_is_capacity_exceeded_with_fake_gpu_provider(tmp_path: Path) -> None:
    """No GPU here: the provider is fake and reports none."""
    with pytest.raises(HitchError) as info:
        _leases(tmp_path, "root-a").acquire("svc")
    assert info.value.code == "inference_capacity_exceeded"


def test_a_lease_dir_owned_by_a_symlink_is_refused_with_fake_gpu_provider(tmp_path: Path) -> None:
    """No GPU here: the provider is fake."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "gpu-leases").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(HitchError) as info:
        _leases(tmp_path, "root-a", GPU_A).acquire("svc")
    assert info.value.code == "storage_write_failed"


def test_default_lease_dir_is_per_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1234")
    assert default_lease_dir() == Path("/run/user/1234/hitch/gpu-leases")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert default_lease_dir() == Path(f"/tmp/hitch-gpu-leases-{os.getuid()}")


def test_two_managers_with_different_roots_cannot_share_a_gpu_with_fake_gpu_provider(tmp_path: Path) -> None:
    """No GPU here: the provider is fake. Two managers (two roots) share one lease directory."""
    lock = make_lock(device="cuda")
    assert lock.resources.gpu_count == 1
    lease_dir = tmp_path / "gpu-leases"
    starters = (FakeStarter(), FakeStarter())
    managers = [
        ServiceManager(
            HitchRoot(tmp_path / name),
            starter,
            ResourceLedger(BIG),
            GpuLeases(FakeGpuProvider(GPU_A), tmp_path / name, lease_dir=lease_dir),
            events=lambda e: None,
        )
        for name, starter in zip(("root-a", "root-b"), starters, strict=True)
    ]

    async def body() -> None:
        lease = await managers[0].acquire(lock, "run-a")
        assert starters[0].requests[0].gpu_uuid == GPU_A
        assert managers[0].services()[0].gpu_uuid == GPU_A
        with pytest.raises(HitchError) as info:
            await managers[1].acquire(lock, "run-b")
        assert info.value.code == "inference_capacity_exceeded"
        assert starters[1].starts == 0
        assert managers[1].ledger.holders() == {}  # the refused start gave its ledger share back
        await managers[0].release(lease.lease_id)
        await managers[0].stop(lease.service_id)
        assert not (lease_dir / f"{GPU_A}.json").exists()
        other = await managers[1].acquire(lock, "run-b")
        assert starters[1].requests[0].gpu_uuid == GPU_A
        await managers[1].close()
        assert not (lease_dir / f"{GPU_A}.json").exists()
        assert other.epoch == 2  # the refused start used epoch 1; numbers are never reused

    run(body())


def test_manager_without_gpu_leases_refuses_a_gpu_lock(tmp_path: Path) -> None:
    starter = FakeStarter()
    manager = ServiceManager(HitchRoot(tmp_path / "root"), starter, ResourceLedger(BIG), events=lambda e: None)

    async def body() -> None:
        with pytest.raises(HitchError) as info:
            await manager.acquire(make_lock(device="cuda"), "run-1")
        assert info.value.code == "inference_capacity_exceeded"
        assert starter.starts == 0 and manager.ledger.holders() == {}

    run(body())


def test_process_start_time_tells_a_gone_process_from_a_live_one() -> None:
    pid, started = _dead_pid()
    now = process_start_time(pid)
    assert now is None or now != started  # gone, or the PID already belongs to another process
    assert process_start_time(os.getpid()) is not None
