"""The supervisor with the fake engine as a real process: states, events, failures, secrets, cleanup."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
from pathlib import Path

import httpx
import pytest

from harness.engine import EngineProgram
from harness.engine.launch_spec import ExitInfo, LaunchSpec
from harness.errors import HitchError
from harness.launch.process import ProcessEngine, ProcessLauncher, live_group_members
from harness.service import ServiceStateStore, ServiceSupervisor
from tests.harness.engine.inputs import ServiceInputs, checkpoint_cache, service_inputs

pytestmark = pytest.mark.integration


@pytest.fixture
def inputs(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> ServiceInputs:
    return service_inputs(tmp_path / "root", checkpoint_cache(tmp_path_factory.getbasetemp()))


def _supervisor(inputs: ServiceInputs, *fake_flags: str, **kwargs: float) -> ServiceSupervisor:
    options: dict[str, float] = {"monitor_interval_s": 0.1, "startup_timeout_s": 30.0, "stop_timeout_s": 10.0}
    options.update(kwargs)
    return inputs.supervisor(EngineProgram.fake(tuple(fake_flags)), **options)


def _events(sup: ServiceSupervisor) -> list[tuple[str, int]]:
    return [(e.event, e.epoch) for e in sup.store.events()]


def _pid(sup: ServiceSupervisor) -> int:
    engine = sup.engine
    assert isinstance(engine, ProcessEngine)
    return engine.pid


def test_start_ready_stop_records_states_and_leaves_nothing(inputs: ServiceInputs) -> None:
    released: list[str] = []

    async def run() -> None:
        sup = _supervisor(inputs)
        sup.on_released(lambda: released.append("released"))
        endpoint = await sup.start()
        assert sup.state == "ready" and endpoint.epoch == 1
        record = ServiceStateStore(inputs.root, "svc-test").read()
        assert record is not None and record.state == "ready" and record.epoch == 1
        assert record.process is not None and record.process.pid == _pid(sup) and record.process.start_time
        async with httpx.AsyncClient(base_url=endpoint.base_url) as client:
            models = await client.get("/v1/models", headers={"Authorization": f"Bearer {endpoint.keys.api_key}"})
        assert models.json()["data"][0]["id"] == endpoint.wire_model
        pid = _pid(sup)
        exit_info = await sup.stop()
        assert exit_info is not None and exit_info.exit_code == 0
        assert live_group_members(pid) == []
        assert sup.state == "stopped" and released == ["released"]
        final = ServiceStateStore(inputs.root, "svc-test").read()
        assert final is not None and final.state == "stopped"
        assert _events(sup) == [
            ("inference.starting", 1),
            ("inference.ready", 1),
            ("inference.draining", 1),
            ("inference.stopped", 1),
        ]
        assert all(e.owner_id == "test-owner" and e.inference_id == inputs.lock.inference_id for e in sup.store.events())
        second = await sup.start()  # a restart is a new epoch with new keys
        assert second.epoch == 2 and second.keys.api_key != endpoint.keys.api_key
        await sup.stop()

    asyncio.run(run())


def test_a_start_whose_probe_slots_linger_becomes_ready_and_records_the_wait(inputs: ServiceInputs) -> None:
    """The readiness race: each probe's slot stays taken for a while after its reply (as SGLang's did behind
    Docker's proxy, so its /flush_cache answered 400). The start waits for the engine to free them, flushes
    once, and its ready event says how long it waited."""

    async def run() -> None:
        sup = _supervisor(inputs, "--fault", "slot_release_lag:t=3")
        endpoint = await sup.start()
        try:
            report = endpoint.readiness
            assert report.steps[-1] == "flush_cache"
            assert report.flush_attempts == 1 and report.flush_refusals == []
            ready = [e for e in sup.store.events() if e.event == "inference.ready"]
            assert ready[-1].details["engine_idle_wait_s"] == report.idle_wait_s
            assert ready[-1].details["flush_attempts"] == 1
        finally:
            await sup.stop()

    asyncio.run(run())


def test_startup_hang_times_out_and_the_process_is_gone(inputs: ServiceInputs) -> None:
    failures: list[str] = []
    released: list[str] = []

    async def run() -> None:
        sup = _supervisor(inputs, "--fault", "startup_hang", startup_timeout_s=3.0)
        sup.on_failure(lambda err: failures.append(err.code))
        sup.on_released(lambda: released.append("released"))
        with pytest.raises(HitchError) as caught:
            await sup.start()
        assert caught.value.code == "inference_start_timeout"
        assert live_group_members(_pid(sup)) == []
        assert sup.state == "failed"

    asyncio.run(run())
    record = ServiceStateStore(inputs.root, "svc-test").read()
    assert record is not None and record.state == "failed" and record.error_code == "inference_start_timeout"
    assert failures == ["inference_start_timeout"] and released == ["released"]


def test_engine_exit_is_reported_by_the_monitor(inputs: ServiceInputs) -> None:
    failures: list[HitchError] = []
    order: list[str] = []

    async def run() -> None:
        # The readiness probes are 4 counted requests; the 5th (ours) makes the fake exit with code 3.
        sup = _supervisor(inputs, "--fault", "exit_after_requests:n=5,code=3")
        sup.on_failure(lambda err: (failures.append(err), order.append("failure")))
        sup.on_released(lambda: order.append("released"))
        endpoint = await sup.start()
        pid = _pid(sup)
        async with httpx.AsyncClient(base_url=endpoint.base_url) as client:
            await client.get("/v1/models", headers={"Authorization": f"Bearer {endpoint.keys.api_key}"})
        for _ in range(2400):  # a bound for a wedged test, not a speed claim (loaded CI machines)
            if sup.state == "failed" and order[-1:] == ["released"]:
                break
            await asyncio.sleep(0.05)
        assert sup.state == "failed"
        assert live_group_members(pid) == []
        assert await sup.stop() is not None  # stop on a failed service is a no-op

    asyncio.run(run())
    assert [f.code for f in failures] == ["inference_process_exited"]
    assert failures[0].details["exit_code"] == 3
    assert order == ["failure", "released"]
    record = ServiceStateStore(inputs.root, "svc-test").read()
    assert record is not None and record.state == "failed" and record.error_code == "inference_process_exited"
    events = ServiceStateStore(inputs.root, "svc-test").events()
    assert [e.event for e in events] == ["inference.starting", "inference.ready", "inference.failed"]
    assert events[-1].details["exit_code"] == 3


def test_wrong_model_is_a_lock_mismatch(inputs: ServiceInputs) -> None:
    async def run() -> None:
        sup = _supervisor(inputs, "--fault", "wrong_model:name=other-model")
        with pytest.raises(HitchError) as caught:
            await sup.start()
        err = caught.value
        assert err.code == "inference_lock_mismatch"
        assert {"model_path", "served_model_name"} <= set(err.details["fields"])
        assert live_group_members(_pid(sup)) == [] and sup.state == "failed"

    asyncio.run(run())


def test_secrets_stay_in_the_private_files(inputs: ServiceInputs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-must-not-reach-the-engine")
    monkeypatch.setenv("HF_TOKEN", "hf-token-must-not-reach-the-engine")

    async def run() -> tuple[str, str]:
        sup = _supervisor(inputs)
        endpoint = await sup.start()
        pid = _pid(sup)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        for key in endpoint.keys.values():
            assert key.encode() not in cmdline and key.encode() not in environ
        assert b"AWS_SECRET_ACCESS_KEY" not in environ and b"hf-token" not in environ
        await sup.stop()
        return endpoint.keys.api_key, endpoint.keys.admin_key

    api_key, admin_key = asyncio.run(run())
    private = inputs.root.private / "svc-test"
    holders: dict[str, list[str]] = {api_key: [], admin_key: []}
    for dirpath, _, names in os.walk(inputs.root.path):
        for name in names:
            path = Path(dirpath) / name
            data = path.read_bytes()
            for key, found in holders.items():
                if key.encode() in data:
                    found.append(str(path.relative_to(private)) if path.is_relative_to(private) else str(path))
                    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(holders[api_key]) == ["engine-api-key", "engine-config.yaml"]
    assert sorted(holders[admin_key]) == ["admin-api-key", "engine-config.yaml"]
    log = (inputs.root.service_dir("svc-test") / "engine.log").read_text()
    assert "Uvicorn running" in log  # the log is there, only without keys
    state = json.loads((inputs.root.service_dir("svc-test") / "state.json").read_text())
    assert state["state"] == "stopped"


def test_a_cancelled_start_leaves_no_engine(inputs: ServiceInputs) -> None:
    async def run() -> None:
        sup = _supervisor(inputs, "--fault", "startup_hang", startup_timeout_s=60.0)
        task = asyncio.ensure_future(sup.start())
        while sup.engine is None:
            await asyncio.sleep(0.02)
        pid = _pid(sup)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert live_group_members(pid) == [] and sup.state == "failed"

    asyncio.run(run())


class _OomLauncher:
    """Wraps the process launcher and reports any exit as a confirmed OOM (what the OCI launcher does for
    ``OOMKilled``), to test the supervisor's mapping without a memory-limited container."""

    kind = "process"

    def __init__(self) -> None:
        self.inner = ProcessLauncher()

    async def start(self, spec: LaunchSpec) -> ProcessEngine:
        engine = await self.inner.start(spec)
        real_poll = engine.poll

        async def poll() -> ExitInfo | None:
            info = await real_poll()
            return None if info is None else ExitInfo(exit_code=137, oom=True, reason="OOMKilled")

        engine.poll = poll  # type: ignore[method-assign]
        return engine


def test_a_confirmed_oom_is_inference_oom(inputs: ServiceInputs) -> None:
    failures: list[HitchError] = []

    async def run() -> None:
        program = EngineProgram.fake(("--fault", "exit_after_requests:n=5,code=137"))
        sup = inputs.supervisor(program, _OomLauncher(), monitor_interval_s=0.1)
        sup.on_failure(failures.append)
        endpoint = await sup.start()
        async with httpx.AsyncClient(base_url=endpoint.base_url) as client:
            await client.get("/v1/models", headers={"Authorization": f"Bearer {endpoint.keys.api_key}"})
        for _ in range(2400):  # a bound for a wedged test, not a speed claim (loaded CI machines)
            if sup.state == "failed":
                break
            await asyncio.sleep(0.05)
        assert live_group_members(_pid(sup)) == []

    asyncio.run(run())
    assert [f.code for f in failures] == ["inference_oom"] and failures[0].details["exit_code"] == 137


def test_a_frozen_engine_fails_the_health_monitor_and_is_killed(inputs: ServiceInputs) -> None:
    failures: list[str] = []

    async def run() -> None:
        sup = _supervisor(inputs, health_timeout_s=0.3, health_failures=2, stop_timeout_s=1.0)
        sup.on_failure(lambda err: failures.append(err.code))
        await sup.start()
        pid = _pid(sup)
        os.kill(pid, signal.SIGSTOP)  # alive but answering nothing
        for _ in range(2400):  # a bound for a wedged test, not a speed claim (loaded CI machines)
            if sup.state == "failed" and sup.last_exit is not None:
                break
            await asyncio.sleep(0.05)
        assert sup.state == "failed"
        assert live_group_members(pid) == []

    asyncio.run(run())
    assert failures == ["inference_engine_unhealthy"]


def test_drain_then_stop(inputs: ServiceInputs) -> None:
    async def run() -> None:
        sup = _supervisor(inputs)
        await sup.start()
        await sup.drain()
        assert sup.state == "draining" and sup.endpoint is not None
        record = sup.store.read()
        assert record is not None and record.state == "draining"
        await sup.stop()
        assert sup.state == "stopped" and sup.endpoint is None
        assert [e.event for e in sup.store.events()][-2:] == ["inference.draining", "inference.stopped"]

    asyncio.run(run())
