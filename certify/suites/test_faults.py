"""faults: every fault mode of the fake engine, and the faults a real engine can really suffer, end to end.

Each check drives one fault through the gateway and asserts what the client receives (HTTP status, our
error code, a broken or clean stream), the evidence row the gateway wrote (status, error code), and the
clean-up (no permit or engine slot left busy, the engine serves the next request; after a crash the
service is ``failed`` and its binding revoked, and a new run gets a new epoch).

Where a fault runs:

- stream faults that leave the engine healthy run on the session's shared fake engine, on a run of their
  own, and clear the fault in a ``finally``;
- faults that need a short request timeout, a small response cap or a leaked engine slot run on a private
  fake engine behind a private gateway (:class:`~certify.suites._support_engines.PrivateStack`);
- faults that kill or refuse an engine run on a private daemon (its own HITCH_ROOT); for a real engine
  that daemon runs the real engine: a SIGKILL mid-stream, a new epoch after it.

A container OOM needs Docker; without it that (non-required) check is skipped, and the fake
``memory_growth`` check covers what a process launcher can honestly report (an unconfirmed kill is
``inference_process_exited``, never ``inference_oom``).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from certify.registry import check, declared_in
from certify.session import CertifyEnv, RunHandle, fake_engine_image
from certify.suites._support_engines import (
    PrivateDaemon,
    PrivateStack,
    RawStream,
    chat_body,
    close_held_stream,
    engine_running,
    evidence_rows,
    hold_stream,
    kill_pid,
    pid_alive,
    private_daemon_fixture,  # noqa: F401 (the fixture ``private_daemon``)
    session_lock,
    wait_until,
)
from fixtures.fake_sglang.faults import FAULT_NAMES
from harness.errors import HitchError

FAKE = ("fake",)
MODE_CHECKS = {
    "split_utf8": "faults.split_utf8.exact_bytes",
    "coalesce_events": "faults.coalesce_events.counted",
    "partial_event_close": "faults.partial_event_close.broken_stream",
    "inband_error": "faults.inband_error.chat",
    "connection_reset": "faults.connection_reset.broken_stream",
    "stall_mid_stream": "faults.stall_mid_stream.request_timeout",
    "slow_headers": "faults.slow_headers.request_timeout",
    "ignore_aborts": "faults.ignore_aborts.permit_released",
    "oversized_response": "faults.oversized_response.size_cap",
    "crash_mid_stream": "faults.crash_mid_stream.service_failed",
    "exit_after_requests": "faults.exit_after_requests.service_failed",
    "exit_after_seconds": "faults.exit_after_seconds.idle_death",
    "wrong_model": "faults.wrong_model.refused",
    "startup_hang": "faults.startup_hang.start_timeout",
    "memory_growth": "faults.memory_growth.unconfirmed_oom",
}


# -- shared helpers -------------------------------------------------------------------------------------


def _gateway_dir(env: CertifyEnv) -> Path:
    return env.root.root / "inference" / "gateway"


@contextlib.contextmanager
def _shared_fault(env: CertifyEnv, *faults: str) -> Iterator[RunHandle]:
    """A run of its own on the shared fake engine with ``faults`` active; faults cleared and run deleted after."""
    assert env.fake is not None
    run = env.new_run()
    try:
        env.fake.reset()
        env.fake.faults(*faults)
        yield run
    finally:
        env.fake.reset()
        env.delete_run(run)


def _serves(base_url: str, headers: dict[str, str], model: str) -> int:
    r = httpx.post(base_url + "/chat/completions", json=chat_body(model, stream=False), headers=headers, timeout=60)
    return r.status_code


def _inference_requests(env: CertifyEnv) -> list[dict[str, Any]]:
    assert env.fake is not None
    return [r for r in env.fake.received() if r["path"].startswith("/v1/")]


def _stream(base_url: str, route: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, bytes, bool]:
    """(status, bytes, broken): broken when the chunked body ended without its terminator."""
    raw = b""
    with httpx.stream("POST", base_url + route, json=body, headers=headers, timeout=60) as r:
        try:
            for chunk in r.iter_raw():
                raw += chunk
        except httpx.RemoteProtocolError:
            return r.status_code, raw, True
        return r.status_code, raw, False


def _row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(rows) == 1, rows
    return rows[0]


def _chat_stream(run: RunHandle) -> tuple[int, bytes, bool]:
    return _stream(run.base_url, "/chat/completions", chat_body(run.wire_model, stream=True), run.headers())


def _shared_row(env: CertifyEnv, run: RunHandle) -> dict[str, Any]:
    """The one evidence row of ``run`` on the session's gateway."""
    return _row(evidence_rows(_gateway_dir(env), run.binding_id))


# -- stream faults on the shared fake engine -------------------------------------------------------------


@pytest.mark.exclusive_engine
@check(MODE_CHECKS["split_utf8"], engines=FAKE, description="split multibyte characters reach the client whole, evidence ok")
def test_split_utf8(certify_env: CertifyEnv, certify_record: Any) -> None:
    with _shared_fault(certify_env, "split_utf8") as run:
        status, raw, broken = _chat_stream(run)
        assert (status, broken) == (200, False)
        text = raw.decode("utf-8")  # strict: whole characters only
        assert "é漢🙂" in text and raw.endswith(b"data: [DONE]\n\n")
        row = _shared_row(certify_env, run)
        certify_record.detail("evidence", {k: row[k] for k in ("status", "error_code", "output_tokens")})
        assert row["status"] in ("completed", "incomplete") and row["error_code"] is None and row["ttft_ms"] is not None


@pytest.mark.exclusive_engine
@check(MODE_CHECKS["coalesce_events"], engines=FAKE, description="several SSE events in one write are parsed and counted")
def test_coalesce_events(certify_env: CertifyEnv, certify_record: Any) -> None:
    with _shared_fault(certify_env, "coalesce_events:n=4") as run:
        body = {"model": run.wire_model, "input": "hello", "max_output_tokens": 6, "stream": True}
        status, raw, broken = _stream(run.base_url, "/responses", body, run.headers())
        assert (status, broken) == (200, False)
        events = [e for e in raw.split(b"\n\n") if e.strip()]
        last = json.loads(events[-1].split(b"data: ", 1)[1])
        usage = last["response"]["usage"]
        row = _shared_row(certify_env, run)
        certify_record.detail("events", len(events))
        assert row["status"] in ("completed", "incomplete") and row["output_tokens"] == usage["output_tokens"]
        assert row["engine_rid"] == last["response"]["id"]


@pytest.mark.exclusive_engine
@check(
    MODE_CHECKS["partial_event_close"],
    engines=FAKE,
    description="half an event then close: broken client stream, evidence failed",
)
def test_partial_event_close(certify_env: CertifyEnv, certify_record: Any) -> None:
    with _shared_fault(certify_env, "partial_event_close") as run:
        status, _, broken = _chat_stream(run)
        assert (status, broken) == (200, True), "the client must see a broken stream, never a clean end"
        row = _shared_row(certify_env, run)
        certify_record.detail("evidence", {k: row[k] for k in ("status", "error_code", "http_status")})
        assert (row["status"], row["error_code"]) == ("failed", "inference_upstream_failed")
        assert certify_env.fake is not None
        certify_env.fake.faults()
        assert _serves(run.base_url, run.headers(), run.wire_model) == 200


@pytest.mark.exclusive_engine
@check(
    "faults.inband_error.{api}",
    params={"api": ("chat", "responses")},
    engines=FAKE,
    description="{api}: HTTP 200 then an in-band error: evidence failed, not retried",
)
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_inband_error(certify_env: CertifyEnv, certify_record: Any, api: str) -> None:
    with _shared_fault(certify_env, "inband_error:after=2") as run:
        if api == "chat":
            route, body = "/chat/completions", chat_body(run.wire_model, stream=True)
        else:
            route, body = "/responses", {"model": run.wire_model, "input": "hi", "stream": True}
        status, raw, _ = _stream(run.base_url, route, body, run.headers())
        assert status == 200
        assert b'"error"' in raw or b"response.failed" in raw, "the in-band error must reach the client"
        row = _shared_row(certify_env, run)
        assert (row["status"], row["error_code"]) == ("failed", "inference_upstream_failed")
        assert len(_inference_requests(certify_env)) == 1, "a POST is never retried"


@pytest.mark.exclusive_engine
@check(MODE_CHECKS["connection_reset"], engines=FAKE, description="TCP reset mid-stream: broken client stream, slot freed")
def test_connection_reset(certify_env: CertifyEnv, certify_record: Any) -> None:
    with _shared_fault(certify_env, "connection_reset:after=2") as run:
        status, _, broken = _chat_stream(run)
        assert (status, broken) == (200, True)
        row = _shared_row(certify_env, run)
        assert (row["status"], row["error_code"]) == ("failed", "inference_upstream_failed")
        wait_until(lambda: engine_running(certify_env.engine_url, certify_env.engine_headers()) == 0, 5.0, what="slot freed")
        assert certify_env.fake is not None
        certify_env.fake.faults()
        assert _serves(run.base_url, run.headers(), run.wire_model) == 200


# -- faults on a private fake engine behind a private gateway --------------------------------------------


@pytest.fixture
def private_stack(certify_env: CertifyEnv, tmp_path: Path) -> Iterator[PrivateStack]:
    if certify_env.engine != "fake":
        pytest.skip("fake engine only")
    lock = session_lock(certify_env)
    execution = lock.execution.model_copy(update={"request_timeout_ms": 2000, "max_running_requests": 1})
    stack = PrivateStack.start(
        certify_env, tmp_path / "stack", lock.model_copy(update={"execution": execution}), max_response_bytes=1 << 20
    )
    try:
        yield stack
    finally:
        stack.close()


def _stack_clean(stack: PrivateStack, acquired: int) -> None:
    """Every permit released exactly once; the engine has nothing running."""
    wait_until(lambda: stack.queue_counts() == (acquired, acquired, 0, 0), 5.0, what="permits released once")
    wait_until(lambda: engine_running(stack.engine_url, stack.engine_headers()) == 0, 5.0, what="engine slot freed")


def _failed_then_recovers(stack: PrivateStack) -> None:
    """The one exchange is recorded as an upstream failure, nothing is left held, and with the fault cleared
    the same stack serves again."""
    row = _row(stack.rows())
    assert (row["status"], row["error_code"]) == ("failed", "inference_upstream_failed")
    _stack_clean(stack, 1)
    stack.control.faults()
    assert _serves(stack.base_url, stack.headers(), stack.wire_model) == 200


def _unary_chat(stack: PrivateStack) -> httpx.Response:
    body = chat_body(stack.wire_model, stream=False)
    return httpx.post(stack.base_url + "/chat/completions", json=body, headers=stack.headers(), timeout=60)


@check(MODE_CHECKS["stall_mid_stream"], engines=FAKE, description="a stalled stream hits the request timeout; upstream aborted")
def test_stall_mid_stream(private_stack: PrivateStack, certify_record: Any) -> None:
    private_stack.control.faults("stall_mid_stream:t=30,after=2")
    t0 = time.monotonic()
    status, _, broken = _stream(
        private_stack.base_url, "/chat/completions", chat_body(private_stack.wire_model, stream=True), private_stack.headers()
    )
    certify_record.metric("stall_timeout_s", round(time.monotonic() - t0, 2))
    assert (status, broken) == (200, True)
    _failed_then_recovers(private_stack)


@check(MODE_CHECKS["slow_headers"], engines=FAKE, description="no status line before the request timeout: 502, slot freed")
def test_slow_headers(private_stack: PrivateStack, certify_record: Any) -> None:
    private_stack.control.faults("slow_headers:t=30")
    r = _unary_chat(private_stack)
    assert (r.status_code, r.json()["error"]["code"]) == (502, "inference_upstream_failed")
    _failed_then_recovers(private_stack)


@check(
    MODE_CHECKS["ignore_aborts"],
    engines=FAKE,
    description="an engine that ignores aborts: the gateway permit is still released once",
)
def test_ignore_aborts(private_stack: PrivateStack, certify_record: Any) -> None:
    private_stack.control.faults("ignore_aborts", "stall_mid_stream:t=30,after=2")
    stream = RawStream(
        private_stack.base_url, private_stack.token, "/chat/completions", chat_body(private_stack.wire_model, stream=True)
    )
    try:
        stream.read_events(2)
        assert stream.status == 200
    finally:
        stream.close()
    row = _row(private_stack.rows())
    assert row["status"] == "cancelled"
    wait_until(lambda: private_stack.queue_counts() == (1, 1, 0, 0), 5.0, what="the gateway permit released once")
    state = private_stack.control.state()
    certify_record.detail("engine_leaked_slots", state["leaked_slots"])
    # The leak stays visible to a saturation monitor: the engine reports a running request that nobody holds.
    assert state["leaked_slots"] == 1 and engine_running(private_stack.engine_url, private_stack.engine_headers()) == 1


@check(MODE_CHECKS["oversized_response"], engines=FAKE, description="an answer over the response cap: 502, evidence failed")
def test_oversized_response(private_stack: PrivateStack, certify_record: Any) -> None:
    private_stack.control.faults("oversized_response:mb=2")
    r = _unary_chat(private_stack)
    assert (r.status_code, r.json()["error"]["code"]) == (502, "inference_upstream_failed")
    _failed_then_recovers(private_stack)


# -- faults that kill or refuse an engine: a private daemon ----------------------------------------------


@pytest.fixture
def fake_pdaemon(certify_env: CertifyEnv, private_daemon: PrivateDaemon) -> Iterator[PrivateDaemon]:
    if certify_env.engine != "fake":
        pytest.skip("fake engine only")
    yield private_daemon
    for run in list(private_daemon.runs.values()):  # nothing of this check stays leased
        if run.run_id != private_daemon.shared.get("warm_run_id"):
            with contextlib.suppress(Exception):
                private_daemon.delete_run(run)


def _failed_event(
    daemon: PrivateDaemon, service_id: str, epoch: int, timeout_s: float = 15.0, need: tuple[str, ...] = ("code",)
) -> dict[str, Any]:
    """The merged details of the epoch's ``inference.failed`` events (supervisor: exit code; manager: code)."""

    def found() -> dict[str, Any] | None:
        merged: dict[str, Any] = {}
        for event in daemon.events(service_id):
            if event.event == "inference.failed" and event.epoch == epoch:
                merged.update({k: v for k, v in event.details.items() if v is not None})
        return merged if all(k in merged for k in need) else None

    return wait_until(found, timeout_s, what="inference.failed")


def _service_failure_code(daemon: PrivateDaemon, inference_id: str, timeout_s: float) -> str | None:
    """The failure code the supervisor recorded for any service of ``inference_id`` (None if none failed)."""
    from harness.service.state_store import ServiceStateStore

    def found() -> str | None:
        if not daemon.root.services.is_dir():
            return None
        for path in sorted(daemon.root.services.iterdir()):
            record = ServiceStateStore(daemon.root, path.name).read()
            if record is None or record.inference_id != inference_id:
                continue
            for event in daemon.events(path.name):
                code = event.details.get("code") if event.event == "inference.failed" else None
                if code:
                    return str(code)
        return None

    try:
        return wait_until(found, timeout_s, what="inference.failed")
    except AssertionError:
        return None


def _revoked(run: RunHandle, timeout_s: float = 10.0) -> dict[str, Any]:
    """The run's next request, once the binding is revoked: 403 inference_binding_revoked."""

    def probe() -> dict[str, Any] | None:
        r = httpx.post(
            run.base_url + "/chat/completions", json=chat_body(run.wire_model, stream=False), headers=run.headers(), timeout=30
        )
        return {"status": r.status_code, "code": r.json()["error"]["code"]} if r.status_code == 403 else None

    return wait_until(probe, timeout_s, interval_s=0.1, what="the binding to be revoked")


def _assert_crashed(
    daemon: PrivateDaemon, run: RunHandle, pid: int, code: str, need: tuple[str, ...] = ("code",)
) -> dict[str, Any]:
    details = _failed_event(daemon, run.service_id, run.epoch, need=need)
    assert details.get("code") == code, details
    record = daemon.record(run.service_id)
    assert record is not None and record.state in ("failed", "stopped") and record.epoch == run.epoch
    assert _revoked(run) == {"status": 403, "code": "inference_binding_revoked"}
    wait_until(lambda: not pid_alive(pid), 15.0, what="the engine process gone")
    daemon.runs.pop(run.run_id, None)
    return details


@check(
    MODE_CHECKS["crash_mid_stream"],
    engines=FAKE,
    description="engine exits mid-stream: process_exited, service failed, binding revoked",
)
def test_crash_mid_stream(fake_pdaemon: PrivateDaemon, certify_record: Any) -> None:
    daemon = fake_pdaemon
    run = daemon.create_run()
    pid = daemon.engine_pid(run.service_id)
    assert pid is not None and daemon.fake is not None
    daemon.fake.faults("crash_mid_stream:after=2,code=1")
    status, _, broken = _stream(run.base_url, "/chat/completions", chat_body(run.wire_model, stream=True), run.headers())
    assert (status, broken) == (200, True)
    row = _row(evidence_rows(daemon.gateway_dir, run.binding_id))
    assert (row["status"], row["error_code"]) == ("failed", "inference_process_exited")
    details = _assert_crashed(daemon, run, pid, "inference_process_exited")
    certify_record.detail("failed_event", details)
    again = daemon.create_run()
    assert again.epoch > run.epoch and _serves(again.base_url, again.headers(), again.wire_model) == 200


@check(
    MODE_CHECKS["exit_after_requests"],
    engines=FAKE,
    description="engine exits after answering: exit code recorded, binding revoked",
)
def test_exit_after_requests(fake_pdaemon: PrivateDaemon, certify_record: Any) -> None:
    daemon = fake_pdaemon
    run = daemon.create_run()
    pid = daemon.engine_pid(run.service_id)
    assert pid is not None and daemon.fake is not None
    daemon.fake.reset()
    daemon.fake.faults("exit_after_requests:n=1,code=3")
    assert _serves(run.base_url, run.headers(), run.wire_model) == 200  # answered, then the engine exits
    details = _assert_crashed(daemon, run, pid, "inference_process_exited", need=("code", "exit_code"))
    certify_record.detail("failed_event", details)
    assert details.get("exit_code") == 3


@check(
    MODE_CHECKS["exit_after_seconds"],
    engines=FAKE,
    description="engine dies while idle: the monitor fails the service, binding revoked",
)
def test_exit_after_seconds(fake_pdaemon: PrivateDaemon, certify_record: Any) -> None:
    daemon = fake_pdaemon
    run = daemon.create_run()
    pid = daemon.engine_pid(run.service_id)
    assert pid is not None and daemon.fake is not None
    with contextlib.suppress(httpx.HTTPError):  # t=0: the engine exits at once, maybe before it answers
        daemon.fake.faults("exit_after_seconds:t=0,code=4")
    details = _assert_crashed(daemon, run, pid, "inference_process_exited", need=("code", "exit_code"))
    certify_record.detail("failed_event", details)
    assert details.get("exit_code") == 4


@check(MODE_CHECKS["wrong_model"], engines=FAKE, description="an engine serving another model is refused before any prompt")
def test_wrong_model(fake_pdaemon: PrivateDaemon, certify_record: Any) -> None:
    daemon = fake_pdaemon
    first = daemon.create_run()  # the lock is sealed; then no service of it may be live
    daemon.stop_service(first.service_id)
    t0 = time.monotonic()
    with pytest.raises(HitchError) as caught:
        daemon.create_run(extra_flags=("--fault", "wrong_model:name=not-the-locked-model"))
    certify_record.metric("wrong_model_refused_s", round(time.monotonic() - t0, 2))
    assert caught.value.code == "inference_lock_mismatch"
    record = daemon.record(first.service_id)
    assert record is not None and record.state in ("failed", "stopped")
    pid = record.process.pid if record.process is not None else None
    if pid is not None:
        wait_until(lambda: not pid_alive(pid), 15.0, what="the refused engine gone")
    assert [e for e in daemon.events(first.service_id) if e.event == "inference.ready" and e.epoch == record.epoch] == []


@check(MODE_CHECKS["startup_hang"], engines=FAKE, description="never ready: inference_start_timeout and the process is gone")
def test_startup_hang(fake_pdaemon: PrivateDaemon, certify_record: Any) -> None:
    daemon = fake_pdaemon
    base = daemon.create_run()
    lock = daemon.sealed_lock(base.inference_id)
    daemon.delete_run(base)
    variant = daemon.seal_variant(lock, execution={"startup_timeout_ms": 3000})
    t0 = time.monotonic()
    with pytest.raises(HitchError) as caught:
        daemon.create_run(inference_id=variant.inference_id, extra_flags=("--fault", "startup_hang"))
    certify_record.metric("startup_hang_refused_s", round(time.monotonic() - t0, 2))
    assert caught.value.code == "inference_start_timeout"
    from harness.service.isolation import service_key

    sid = service_key(variant, "x", None).service_id
    record = daemon.record(sid)
    assert record is not None and record.state in ("failed", "stopped")
    pid = record.process.pid if record.process is not None else None
    assert pid is None or not pid_alive(pid) or wait_until(lambda: not pid_alive(pid), 20.0, what="the hung engine gone")


@check(
    MODE_CHECKS["memory_growth"], engines=FAKE, description="a memory hog killed by SIGKILL is process_exited (OOM unconfirmed)"
)
def test_memory_growth(fake_pdaemon: PrivateDaemon, certify_record: Any) -> None:
    daemon = fake_pdaemon
    run = daemon.create_run()
    pid = daemon.engine_pid(run.service_id)
    assert pid is not None and daemon.fake is not None
    before = psutil.Process(pid).memory_info().rss
    daemon.fake.faults("memory_growth:mb_per_s=128")
    wait_until(lambda: psutil.Process(pid).memory_info().rss > before + (96 << 20), 20.0, what="memory growth")
    certify_record.detail("rss_growth_mib", (psutil.Process(pid).memory_info().rss - before) >> 20)
    kill_pid(pid)  # what the kernel's OOM killer does to a process outside a memory cgroup we own
    details = _assert_crashed(daemon, run, pid, "inference_process_exited")
    certify_record.detail("failed_event", details)
    assert details.get("code") != "inference_oom"


# -- a real kill, both engines ---------------------------------------------------------------------------


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


def _in_flight_stream(daemon: PrivateDaemon, run: RunHandle) -> RawStream:
    """A stream that is still generating (a real engine: the lock's whole budget; the fake: stalled)."""
    if daemon.fake is not None:
        daemon.fake.faults("stall_mid_stream:t=60,after=2")
    return hold_stream(run)


@pytest.fixture(scope="module")
def killed(private_daemon: PrivateDaemon) -> KillOutcome:
    daemon = private_daemon
    run = daemon.create_run()
    pid = daemon.engine_pid(run.service_id)
    assert pid is not None
    stream = _in_flight_stream(daemon, run)
    try:
        t_kill = time.monotonic()
        kill_pid(pid)
        stream.read_all()
    finally:
        stream.close()
    row = _row(evidence_rows(daemon.gateway_dir, run.binding_id))
    failed = _failed_event(daemon, run.service_id, run.epoch, 30.0)
    detect_ms = (time.monotonic() - t_kill) * 1000
    revoked = _revoked(run)
    record = daemon.record(run.service_id)
    pid_gone = not pid_alive(pid)
    daemon.runs.pop(run.run_id, None)
    if daemon.fake is not None:
        with contextlib.suppress(Exception):
            daemon.fake.reset()
    t0 = time.monotonic()
    again = daemon.create_run()
    reacquire_s = time.monotonic() - t0
    again_status = _serves(again.base_url, again.headers(), again.wire_model)
    daemon.shared["warm_run_id"] = again.run_id  # the lifecycle suite measures this service's idle stop
    return KillOutcome(
        run, stream.status, stream.clean_end, row, failed, revoked, record.state if record else "absent", pid_gone, again,
        again_status, detect_ms, reacquire_s,
    )  # fmt: skip


@check(
    "faults.engine_killed.in_flight", description="SIGKILL mid-stream: broken client stream, evidence inference_process_exited"
)
def test_engine_killed_in_flight(killed: KillOutcome, certify_record: Any) -> None:
    certify_record.detail("evidence", {k: killed.row[k] for k in ("status", "error_code", "http_status")})
    assert killed.status == 200 and not killed.clean_end, "the client must see a broken stream"
    assert (killed.row["status"], killed.row["error_code"]) == ("failed", "inference_process_exited")


@check("faults.engine_killed.service_failed", description="after SIGKILL the service is failed and the binding revoked")
def test_engine_killed_service_failed(killed: KillOutcome, certify_record: Any) -> None:
    certify_record.metric("kill_to_failed_ms", round(killed.detect_ms, 1))
    certify_record.detail("failed_event", killed.failed)
    assert killed.failed.get("code") == "inference_process_exited"
    assert killed.record_state in ("failed", "stopped") and killed.pid_gone
    assert killed.revoked == {"status": 403, "code": "inference_binding_revoked"}


@check("faults.engine_killed.new_epoch", description="after SIGKILL a new run gets a new epoch and is served")
def test_engine_killed_new_epoch(killed: KillOutcome, certify_record: Any) -> None:
    certify_record.metric("reacquire_after_kill_s", round(killed.reacquire_s, 2))
    assert killed.again.service_id == killed.run.service_id and killed.again.epoch > killed.run.epoch
    assert killed.again_status == 200


# -- client disconnect on the shared engine, both engines ------------------------------------------------


@pytest.mark.exclusive_engine
@check("faults.client_disconnect.upstream_aborted", description="client gone mid-stream: engine request aborted, permit freed")
def test_client_disconnect(certify_env: CertifyEnv, certify_record: Any) -> None:
    env = certify_env
    run = env.new_run()
    try:
        busy, freed_ms = close_held_stream(env, run)
        certify_record.metric("disconnect_slot_free_ms", round(freed_ms, 1))
        certify_record.detail("engine_load_before_close", busy)
        rows = evidence_rows(_gateway_dir(env), run.binding_id)
        assert rows[-1]["status"] == "cancelled" and rows[-1]["error_code"] is None
        assert freed_ms <= 5000, f"the engine slot was freed {freed_ms:.0f} ms after the client went away"
        if env.fake is not None:
            assert env.fake.state()["num_aborted_requests"] >= 1
        assert _serves(run.base_url, run.headers(), run.wire_model) == 200  # the gateway permit is free again
    finally:
        if env.fake is not None:
            env.fake.reset()
        env.delete_run(run)


# -- OOM under a container memory limit (Docker) ---------------------------------------------------------


def _docker_unreachable() -> str | None:
    """Why the local Docker socket cannot be reached (probed with a socket we close: the Docker SDK leaks
    its socket on a refused connect), or None."""
    import os
    import socket

    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(5.0)
        try:
            probe.connect(host.removeprefix("unix://"))
        except OSError as exc:
            return f"{host}: {type(exc).__name__}"
    return None


# below what real SGLang's server process needs just to import its stack (well over 1 GiB resident)
REAL_ENGINE_OOM_LIMIT = 384 << 20


@check(
    "faults.oom.container_limit",
    required=False,
    description="a container over its memory limit is OOM-killed and reported as inference_oom (needs Docker; "
    "real SGLang when the session runs its image, else the fake engine image)",
)
def test_oom_container_limit(private_daemon: PrivateDaemon, certify_record: Any) -> None:
    pdaemon = private_daemon

    from harness.launch.docker_errors import docker_client

    reason = _docker_unreachable()
    if reason is not None:
        pytest.skip(f"needs a reachable Docker engine: {reason}")
    try:
        docker_client()
    except HitchError as exc:
        pytest.skip(f"needs a reachable Docker engine: {exc.message}")
    # a session of real SGLang in a container (its pinned image) is OOM-killed for real: the server's own
    # imports (torch, transformers) outgrow the limit; otherwise the fake engine image grows on purpose
    real = pdaemon.engine == "sglang" and pdaemon.body.get("launcher") == "oci"
    flags: tuple[str, ...] = ()
    if real:
        image = str(pdaemon.body["image"])
        memory, wait_s = REAL_ENGINE_OOM_LIMIT, 300.0
    else:
        try:
            image = fake_engine_image(pdaemon.root.root / "certify")
        except HitchError as exc:
            pytest.skip(exc.message)
        memory, flags, wait_s = 256 << 20, ("--fault", "memory_growth:mb_per_s=256"), 60.0
    certify_record.detail("engine", "sglang" if real else "fake")
    certify_record.detail("memory_limit_bytes", memory)
    # the warm service (kept for the lifecycle suite, which makes a new one when it is gone) holds the cores a
    # container service needs on a small machine: release and stop it first
    warm = pdaemon.runs.get(str(pdaemon.shared.pop("warm_run_id", None)))
    if warm is not None:
        pdaemon.delete_run(warm)
        pdaemon.stop_service(warm.service_id)
    base = pdaemon.create_run()
    lock = pdaemon.sealed_lock(base.inference_id)
    pdaemon.delete_run(base)
    small = pdaemon.seal_variant(lock, resources={"memory_bytes": memory, "shm_bytes": 64 << 20, "cpu_cores": 1})
    try:
        run = pdaemon.create_run(
            inference_id=small.inference_id,
            engine="sglang" if real else "fake",
            launcher="oci",
            image=image,
            fake_flags=list(flags),
        )
    except HitchError as err:  # killed while starting, or between ready and the run's registration
        certify_record.detail("create_error", err.code)
        if err.code == "inference_capacity_exceeded":  # the private daemon's other services hold the cores
            pytest.skip(f"no free capacity for the container next to the private daemon's services: {err.message}")
        code = _service_failure_code(pdaemon, small.inference_id, wait_s) or err.code
    else:
        code = str(_failed_event(pdaemon, run.service_id, run.epoch, wait_s).get("code"))
        pdaemon.runs.pop(run.run_id, None)
    certify_record.detail("code", code)
    assert code == "inference_oom"


# -- coverage of the fault catalogue ---------------------------------------------------------------------


@check("faults.modes.all_covered", description="every fault mode of the fake engine has a check here")
def test_all_fault_modes_covered(certify_record: Any) -> None:
    declared = {c.id for c in declared_in(sys.modules[__name__])}
    certify_record.detail("modes", sorted(FAULT_NAMES))
    assert set(MODE_CHECKS) == set(FAULT_NAMES), sorted(set(FAULT_NAMES) ^ set(MODE_CHECKS))
    assert all(cid in declared for cid in MODE_CHECKS.values())
    assert len(declared) >= 20
