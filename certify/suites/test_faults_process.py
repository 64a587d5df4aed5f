"""faults (process): the engine hangs, crashes, exits after N requests or N seconds, or never gets ready.

On the fake engine each check uses the fake's fault mode; on real SGLang the same fault is done to the
engine's processes through the launcher's own handle (:class:`fixtures.engine_faults.EngineTarget`): a signal
to its process group on the process launcher, the Docker API on ``oci`` (``docker pause`` for SIGSTOP,
``docker kill -s SIGKILL``). A hang during a stream, a kill mid-stream, after the N-th answer or after N
seconds (a crash), a freeze before it is ready (a start that hangs). The outcome asserted is the same on every
engine and launcher: the client's error, the evidence row, the service failed and its binding revoked (the
exit code a SIGKILL leaves: -9 for a process, 137 for a container), the engine gone, and a new run getting a
new epoch. The wrong-model start is the lock's own launch serving another name, on the session's launcher.

A stall runs on the session's engine (a private gateway with a short request timeout; the engine continues
afterwards); a crash runs on the private daemon (its own HITCH_ROOT), never the session's engine.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from certify.kit.daemon import PrivateDaemon
from certify.kit.engines import sglang_command
from certify.kit.faults import (
    IDLE_GROUP_KILL,
    MODE_CHECKS,
    SHORT_TIMEOUT_MS,
    FaultFront,
    FaultSite,
    assert_crashed,
    failed_event,
    fault_kind,
    fault_summary,
    revoked,
    row,
    sealed_inference_id,
    serves,
    stream,
)
from certify.kit.probes import evidence_rows, session_lock, session_service, wait_until
from certify.kit.requests import chat_body
from certify.kit.streams import RawStream, hold_stream
from certify.kit.white_box import (
    EngineKeys,
    EngineProgram,
    OciLauncher,
    prepare_launch,
    service_key,
    verify_server_info,
    wait_ready,
)
from certify.registry import check
from certify.session import CertifyEnv, RunHandle
from certify.timeline import span
from certify.turns import quiet_turn
from fixtures.engine_faults import EngineTarget
from fixtures.fake_sglang.parity_engines import EngineCommand, launch_engine
from fixtures.process_faults import (
    wrong_model_argv,
)
from fixtures.wrong_model_exec import rewrite
from harness.app.inventory import model_files
from harness.errors import HitchError

_fault_kind = fault_kind("process")


def _session_engine(env: CertifyEnv) -> EngineTarget:
    record = session_service(env)
    assert record is not None and record.process is not None
    return EngineTarget(record.process)


_FREEZE = {False: "SIGSTOP to its process group", True: "docker pause of its container"}
_KILL = {False: "SIGKILL to its process group", True: "docker kill -s SIGKILL of its container"}


# -- a hang mid-stream: the session's engine, a private gateway with a short request timeout --------------


@pytest.mark.exclusive_engine
@check(
    MODE_CHECKS["stall_mid_stream"],
    description="a stalled stream hits the request timeout; upstream aborted, the engine serves again "
    "(SGLang: its process group SIGSTOPped mid-stream)",
    summary=fault_summary,
)
def test_stall_mid_stream(fault_site: FaultSite, certify_record: Any) -> None:
    with fault_site.front(private=True, timeout_ms=SHORT_TIMEOUT_MS) as front:
        if front.proxy is None:
            front.arm(("stall_mid_stream:t=30,after=2",), ())
            status, _, broken = front.chat_stream()
            answered = 0
        else:
            engine = _session_engine(fault_site.env)
            front.faults = [f"freeze the engine after 2 events ({_FREEZE[engine.container_id is not None]})"]
            held, answered = _held_stream(front)
            try:
                with engine.frozen() as stopped:
                    certify_record.detail("stopped_processes", stopped)
                    held.read_all()  # ends when the gateway's request timeout breaks the stream
                front.t_fault_end = time.monotonic()
            finally:
                held.close()
            status, broken = held.status, not held.clean_end
        got = front.rows(at_least=answered + 1)[-1] if front.proxy is not None else row(front.rows())
        front.record(certify_record, {"status": status, "broken": broken}, got)
        assert (status, broken) == (200, True)
        assert (got["status"], got["error_code"]) == ("failed", "inference_upstream_failed")
        front.recovered(certify_record, acquired=answered + 1)


def _held_stream(front: FaultFront, tries: int = 3) -> tuple[RawStream, int]:
    """A stream still generating after two events (the lock's whole budget), and how many earlier tries ended
    on their own (a tiny model may stop early; each such answer is an evidence row before the held one's)."""
    body = chat_body(front.wire_model, stream=True, max_tokens=None, content="Tell a long story.")
    for ended in range(tries):
        held = RawStream(front.base_url, front.token, "/chat/completions", body)
        held.read_events(2)
        if held.status == 200 and not held.done_seen and not held.eof:
            return held, ended
        held.read_all()
        held.close()
    raise AssertionError("could not hold a stream in flight (every answer ended at once)")


# -- crashes: the private daemon -------------------------------------------------------------------------


@pytest.fixture
def pdaemon(private_daemon: PrivateDaemon) -> Iterator[PrivateDaemon]:
    yield private_daemon
    for run in list(private_daemon.runs.values()):  # nothing of this check stays leased
        if run.run_id != private_daemon.shared.get("warm_run_id"):
            with contextlib.suppress(Exception):
                private_daemon.delete_run(run)


def _engine(daemon: PrivateDaemon, run: RunHandle) -> EngineTarget:
    engine = daemon.engine_target(run.service_id)
    assert engine is not None, f"the record of {run.service_id} names no engine process or container"
    return engine


def _record_crash(certify_record: Any, details: dict[str, Any], t_fault: float, client: dict[str, Any]) -> None:
    certify_record.detail("client", client)
    certify_record.detail("failed_event", details)
    certify_record.detail("recovery_ms", round((time.monotonic() - t_fault) * 1000, 1))


# -- a real kill, both engines (first: its restarted service is the warm one the next crash checks use) --


@dataclass
class KillOutcome:
    run: RunHandle
    status: int
    clean_end: bool
    row: dict[str, Any]
    failed: dict[str, Any]
    revoked: dict[str, Any]
    record_state: str
    pid_gone: bool
    again: RunHandle
    again_status: int
    detect_ms: float
    reacquire_s: float
    quiet: dict[str, Any] = field(default_factory=dict)  # the quiet phase its timings were taken in


def _in_flight_stream(daemon: PrivateDaemon, run: RunHandle) -> RawStream:
    """A stream that is still generating (a real engine: the lock's whole budget; the fake: stalled)."""
    if daemon.fake is not None:
        daemon.fake.faults("stall_mid_stream:t=60,after=2")
    return hold_stream(run)


@pytest.fixture(scope="module")
def killed(private_daemon: PrivateDaemon, request: pytest.FixtureRequest) -> KillOutcome:
    daemon = private_daemon
    run = _warm_run(daemon)
    engine = _engine(daemon, run)
    before = _answered(daemon, run)
    # the kill's timings (detection, the next epoch's start) are taken with the machine to itself
    with quiet_turn(request.config, "engine killed") as phase:
        outcome = _kill_in_flight(daemon, run, engine, before)
    outcome.quiet = phase.detail()
    return outcome


def _kill_in_flight(daemon: PrivateDaemon, run: RunHandle, engine: EngineTarget, before: int) -> KillOutcome:
    stream_ = _in_flight_stream(daemon, run)
    try:
        t_kill = time.monotonic()
        engine.kill(leader_only=True)
        stream_.read_all()
    finally:
        stream_.close()
    got = row(evidence_rows(daemon.gateway_dir, run.binding_id, at_least=before + 1)[before:])
    failed = failed_event(daemon, run.service_id, run.epoch, 30.0)
    detect_ms = (time.monotonic() - t_kill) * 1000
    gone = revoked(run)
    record = daemon.record(run.service_id)
    pid_gone = not engine.alive()
    daemon.runs.pop(run.run_id, None)
    if daemon.fake is not None:
        with contextlib.suppress(Exception):
            daemon.fake.reset()
    t0 = time.monotonic()
    again = daemon.create_run()
    reacquire_s = time.monotonic() - t0
    again_status = _serves_recorded(daemon, again)
    daemon.shared["warm_run_id"] = again.run_id  # the next checks (and the lifecycle suite) use this service
    return KillOutcome(
        run, stream_.status, stream_.clean_end, got, failed, gone, record.state if record else "absent", pid_gone, again,
        again_status, detect_ms, reacquire_s,
    )  # fmt: skip


@check(
    "faults.engine_killed.in_flight",
    description="SIGKILL mid-stream: broken client stream, evidence inference_process_exited",
    summary=fault_summary,
)
def test_engine_killed_in_flight(killed: KillOutcome, certify_record: Any) -> None:
    certify_record.detail("client", {"status": killed.status, "broken": not killed.clean_end})
    certify_record.detail("evidence", {k: killed.row[k] for k in ("status", "error_code", "http_status")})
    assert killed.status == 200 and not killed.clean_end, "the client must see a broken stream"
    assert (killed.row["status"], killed.row["error_code"]) == ("failed", "inference_process_exited")


@check(
    "faults.engine_killed.service_failed",
    description="after SIGKILL the service is failed and the binding revoked",
    summary=fault_summary,
)
def test_engine_killed_service_failed(killed: KillOutcome, certify_record: Any) -> None:
    certify_record.metric("kill_to_failed_ms", round(killed.detect_ms, 1))
    certify_record.detail("quiet_phase", killed.quiet)
    certify_record.detail("failed_event", killed.failed)
    certify_record.detail("client", killed.revoked)
    assert killed.failed.get("code") == "inference_process_exited"
    assert killed.record_state in ("failed", "stopped") and killed.pid_gone
    assert killed.revoked == {"status": 403, "code": "inference_binding_revoked"}


@check(
    "faults.engine_killed.new_epoch", description="after SIGKILL a new run gets a new epoch and is served", summary=fault_summary
)
def test_engine_killed_new_epoch(killed: KillOutcome, certify_record: Any) -> None:
    certify_record.metric("reacquire_after_kill_s", round(killed.reacquire_s, 2))
    certify_record.detail("quiet_phase", killed.quiet)
    certify_record.detail("recovery_ms", round(killed.reacquire_s * 1000, 1))
    assert killed.again.service_id == killed.run.service_id and killed.again.epoch > killed.run.epoch
    assert killed.again_status == 200


@check(
    MODE_CHECKS["crash_mid_stream"],
    description="engine exits mid-stream: process_exited, service failed, binding revoked, a new epoch serves "
    "(SGLang: SIGKILL to its process group mid-stream)",
    summary=fault_summary,
)
def test_crash_mid_stream(pdaemon: PrivateDaemon, certify_record: Any) -> None:
    run = _warm_run(pdaemon)
    engine = _engine(pdaemon, run)
    before = _answered(pdaemon, run)  # the warm run has served once
    if pdaemon.fake is not None:
        pdaemon.fake.faults("crash_mid_stream:after=2,code=1")
        status, _, broken = stream(run.base_url, "/chat/completions", chat_body(run.wire_model, stream=True), run.headers())
        t_fault = time.monotonic()
    else:
        held = hold_stream(run)
        try:
            t_fault = time.monotonic()
            engine.kill()
            certify_record.detail("fault", {"via": _KILL[engine.container_id is not None]})
            held.read_all()
        finally:
            held.close()
        status, broken = held.status, not held.clean_end
    got = row(evidence_rows(pdaemon.gateway_dir, run.binding_id, at_least=before + 1)[before:])
    certify_record.detail("evidence", {k: got[k] for k in ("status", "error_code", "http_status")})
    assert (status, broken) == (200, True)
    assert (got["status"], got["error_code"]) == ("failed", "inference_process_exited")
    details = assert_crashed(pdaemon, run, engine, "inference_process_exited")
    again = pdaemon.create_run()
    assert again.epoch > run.epoch and _serves_recorded(pdaemon, again) == 200
    _record_crash(certify_record, details, t_fault, {"status": status, "broken": broken})
    pdaemon.shared["warm_run_id"] = again.run_id  # the next check's run shares this service


def _warm_run(daemon: PrivateDaemon) -> RunHandle:
    """The warm service's run when there is one (no engine start paid), else a new run."""
    warm = daemon.runs.get(str(daemon.shared.pop("warm_run_id", None)))
    return warm if warm is not None else daemon.create_run()


@check(
    MODE_CHECKS["exit_after_requests"],
    description="engine exits after answering: exit code recorded, binding revoked (SGLang: SIGKILL once the answer is recorded)",
    summary=fault_summary,
)
def test_exit_after_requests(pdaemon: PrivateDaemon, certify_record: Any) -> None:
    run = _warm_run(pdaemon)
    engine = _engine(pdaemon, run)
    if pdaemon.fake is not None:
        pdaemon.fake.reset()
        pdaemon.fake.faults("exit_after_requests:n=1,code=3")
        assert serves(run.base_url, run.headers(), run.wire_model) == 200  # answered, then the engine exits
        t_fault = time.monotonic()
    else:
        before = _answered(pdaemon, run)
        assert serves(run.base_url, run.headers(), run.wire_model) == 200
        engine.kill_when(lambda: _answered(pdaemon, run) > before, timeout_s=30)
        certify_record.detail("fault", {"via": _KILL[engine.container_id is not None]})
        t_fault = time.monotonic()
    details = assert_crashed(pdaemon, run, engine, "inference_process_exited", need=("code", "exit_code"))
    _record_crash(certify_record, details, t_fault, {"status": 200, "answered": True})
    assert details.get("exit_code") == (3 if pdaemon.fake is not None else engine.killed_exit_code)


def _serves_recorded(daemon: PrivateDaemon, run: RunHandle) -> int:
    """One answer through ``run``, returned once its evidence row is on disk (the gateway batches writes), so
    the next check counting this run's rows counts it."""
    before = _answered(daemon, run)
    status = serves(run.base_url, run.headers(), run.wire_model)
    evidence_rows(daemon.gateway_dir, run.binding_id, at_least=before + 1)
    return status


def _answered(daemon: PrivateDaemon, run: RunHandle) -> int:
    """Exchanges of ``run`` the gateway has recorded so far (the N of "exit after N requests")."""
    path = daemon.gateway_dir / "evidence" / f"{run.binding_id}.requests.jsonl"
    return sum(1 for line in path.read_text().splitlines() if line.strip()) if path.exists() else 0


@check(
    MODE_CHECKS["exit_after_seconds"],
    description="engine dies while idle: the monitor fails the service, binding revoked (SGLang: SIGKILL after 1 s idle)",
    summary=fault_summary,
)
def test_exit_after_seconds(pdaemon: PrivateDaemon, certify_record: Any) -> None:
    run = pdaemon.create_run()
    engine = _engine(pdaemon, run)
    t_fault = time.monotonic()
    if pdaemon.fake is not None:
        with contextlib.suppress(httpx.HTTPError):  # t=0: the engine exits at once, maybe before it answers
            pdaemon.fake.faults("exit_after_seconds:t=0,code=4")
    else:
        engine.kill_after(1.0).join(30)
        certify_record.detail("fault", {"via": _KILL[engine.container_id is not None]})
    details = assert_crashed(pdaemon, run, engine, "inference_process_exited", need=("code", "exit_code"))
    _record_crash(certify_record, details, t_fault, {"idle": True, "next_request": 403})
    assert details.get("exit_code") == (4 if pdaemon.fake is not None else engine.killed_exit_code)
    if pdaemon.fake is None:  # on SGLang this is also the memory check's kill (resources module): one engine start
        pdaemon.shared[IDLE_GROUP_KILL] = {"service_id": run.service_id, "epoch": run.epoch, "failed_event": details}


@check(
    MODE_CHECKS["wrong_model"],
    description="an engine serving another model is refused before any prompt (SGLang: launched serving another "
    "name, its /server_info refused by the readiness verification, its process group gone)",
    summary=fault_summary,
)
def test_wrong_model(pdaemon: PrivateDaemon, certify_env: CertifyEnv, certify_record: Any, tmp_path: Path) -> None:
    if pdaemon.fake is None and pdaemon.body.get("launcher") == "oci":
        _wrong_model_container(pdaemon, certify_record)
        return
    if pdaemon.fake is None:
        _wrong_model_sglang(certify_env, certify_record, tmp_path)
        return
    first = pdaemon.create_run()  # the lock is sealed; then no service of it may be live
    pdaemon.stop_service(first.service_id)
    t0 = time.monotonic()
    with pytest.raises(HitchError) as caught:
        pdaemon.create_run(extra_flags=("--fault", "wrong_model:name=not-the-locked-model"))
    certify_record.metric("wrong_model_refused_s", round(time.monotonic() - t0, 2))
    certify_record.detail("client", {"code": caught.value.code})
    assert caught.value.code == "inference_lock_mismatch"
    record = pdaemon.record(first.service_id)
    assert record is not None and record.state in ("failed", "stopped")
    refused = pdaemon.engine_target(first.service_id)
    if refused is not None:
        wait_until(lambda: not refused.alive(), 15.0, what="the refused engine gone")
    assert [e for e in pdaemon.events(first.service_id) if e.event == "inference.ready" and e.epoch == record.epoch] == []


def _wrong_model_container(daemon: PrivateDaemon, certify_record: Any) -> None:
    """The container twin of :func:`_wrong_model_sglang`: the sealed lock's own launch (keys, flags, pinned image,
    limits) with ``--served-model-name`` rewritten, started by the OCI launcher and met by the readiness probe
    the supervisor runs, which must refuse it; the container and its network are gone afterwards."""
    import asyncio
    import dataclasses

    lock = daemon.sealed_lock(sealed_inference_id(daemon))
    launch = prepare_launch(
        daemon.root, lock, model_files(daemon.root, lock.model_id),
        EngineProgram("sglang", ("python3", "-m", "sglang.launch_server")),
        service_id="certify-wrong-model-" + secrets.token_hex(4), epoch=1, port=30000, host="0.0.0.0",
        launcher="oci", image=str(daemon.body["image"]),
    )  # fmt: skip
    spec = dataclasses.replace(launch.spec, argv=rewrite("not-the-locked-model", launch.spec.argv))

    async def start_and_verify() -> tuple[HitchError, str, bool]:
        engine = await OciLauncher(daemon.root.path).start(spec)
        try:
            with pytest.raises(HitchError) as caught:
                await wait_ready(engine, launch.keys, launch.wire_model, launch.expected, 300.0)
        finally:
            await engine.stop(5.0)
        return caught.value, engine.container_id, await asyncio.to_thread(engine._gone)

    t0 = time.monotonic()
    error, container_id, gone = asyncio.run(start_and_verify())
    certify_record.metric("wrong_model_refused_s", round(time.monotonic() - t0, 2))
    certify_record.detail("fault", {"via": "the lock's container launch with --served-model-name not-the-locked-model"})
    certify_record.detail("client", {"code": error.code, "fields": error.details.get("fields")})
    assert error.code == "inference_lock_mismatch" and error.details["fields"] == ["served_model_name"], error
    assert gone, f"container {container_id[:12]} or its network is still present"


def _wrong_model_sglang(env: CertifyEnv, certify_record: Any, workdir: Path) -> None:
    """The daemon launches SGLang from the sealed lock only (no argv hook in the product path), so the engine is
    launched here, wrapped by ``wrong_model_argv``, and its answer goes through the verification readiness runs."""

    command = sglang_command(env.root)
    assert command is not None, "the session's SGLang runtime is not installed under HITCH_ROOT"
    wrapped = EngineCommand("sglang", list(wrong_model_argv("not-the-locked-model", command.argv)), command.env)
    keys = EngineKeys(api_key="sk-" + secrets.token_hex(16), admin_key="sk-" + secrets.token_hex(16))
    model_dir = model_files(env.root, session_lock(env).model_id)
    t0 = time.monotonic()
    with span("private engine start (wrong model)", engine="private"):
        engine = launch_engine(
            wrapped, model_dir, workdir / "wrong-model", keys.api_key, keys.admin_key, env.run.wire_model, 300.0
        )
    try:
        auth = {"Authorization": f"Bearer {keys.api_key}"}
        info = httpx.get(engine.base + "/server_info", headers=auth, timeout=30).json()
        with pytest.raises(HitchError) as caught:
            verify_server_info(info, {"served_model_name": env.run.wire_model}, keys)
    finally:
        engine.stop(grace_s=5)
    certify_record.metric("wrong_model_refused_s", round(time.monotonic() - t0, 2))
    certify_record.detail("fault", {"via": "wrong_model_argv", "served": info.get("served_model_name")})
    certify_record.detail("client", {"code": caught.value.code, "fields": caught.value.details.get("fields")})
    assert caught.value.code == "inference_lock_mismatch" and caught.value.details["fields"] == ["served_model_name"]
    assert not engine.group_alive()


@check(
    MODE_CHECKS["startup_hang"],
    description="never ready: inference_start_timeout and the process is gone (SGLang: SIGSTOP before ready)",
    summary=fault_summary,
)
def test_startup_hang(pdaemon: PrivateDaemon, certify_record: Any) -> None:
    lock = pdaemon.sealed_lock(sealed_inference_id(pdaemon))
    timeout_ms = 3000 if pdaemon.fake is not None else 8000  # SGLang: stopped as soon as its pid is recorded
    variant = pdaemon.seal_variant(lock, execution={"startup_timeout_ms": timeout_ms})
    sid = service_key(variant, "x", None).service_id
    flags = ("--fault", "startup_hang") if pdaemon.fake is not None else ()
    caught: list[BaseException] = []

    def create() -> None:
        try:
            pdaemon.create_run(inference_id=variant.inference_id, extra_flags=flags)
        except BaseException as exc:
            caught.append(exc)

    t0 = time.monotonic()
    starter = threading.Thread(target=create, daemon=True)
    starter.start()
    if pdaemon.fake is None:
        hung = wait_until(lambda: pdaemon.engine_target(sid), 60.0, interval_s=0.01, what="the engine's process or container")
        hung.stop()  # before it can be ready
        certify_record.detail(
            "fault", {"via": _FREEZE[hung.container_id is not None], "seen_after_s": round(time.monotonic() - t0, 2)}
        )
    starter.join(120)
    assert not starter.is_alive()
    certify_record.metric("startup_hang_refused_s", round(time.monotonic() - t0, 2))
    assert len(caught) == 1 and isinstance(caught[0], HitchError), caught
    certify_record.detail("client", {"code": caught[0].code})
    assert caught[0].code == "inference_start_timeout"
    record = pdaemon.record(sid)
    assert record is not None and record.state in ("failed", "stopped")
    if record.process is not None:
        gone = EngineTarget(record.process)
        wait_until(lambda: not gone.any_alive(), 30.0, what="the hung engine gone")
    certify_record.detail("recovery_ms", round((time.monotonic() - t0) * 1000, 1))
