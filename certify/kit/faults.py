"""What the fault suites (``test_faults_*``) share: where a fault runs, how the client and the evidence see it.

A network fault runs on a :class:`FaultFront`: one run whose upstream carries the fault, on either engine.

- fake engine: the fake's own fault modes, on the session's shared engine (a run of its own) or, for a fault
  that needs a short request timeout or a small response cap, on a private fake engine behind a private
  gateway (:class:`~certify.kit.stack.PrivateStack`);
- real SGLang: the fault proxy (:mod:`fixtures.fault_proxy`) between a private gateway (its own loop thread,
  the check's lock and response cap) and the session's real engine. One proxy serves the whole module; every
  proxy fault leaves the engine healthy (the proxy passes a client's close on to it), so no engine is started
  for these checks.

Every check asserts the same outcome on both engines: what the client saw, the evidence row, and that
nothing is left held (gateway permits released once, no engine request running), then that the same front
serves again with the fault cleared. Each records ``client`` (what the client saw) and ``recovery_ms`` (from
the fault's end at the client until the front served again) for the run page.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from certify.kit.daemon import PrivateDaemon
from certify.kit.probes import engine_load, evidence_rows, session_lock, wait_until
from certify.kit.requests import chat_body
from certify.kit.stack import PrivateStack, bind_upstream, queue_counts, run_handle
from certify.session import CertifyEnv, RunHandle
from fixtures.engine_faults import EngineTarget
from fixtures.fault_proxy import FaultProxy, ProxyFault, start_fault_proxy
from gateway.server import GatewayConfig
from gateway.testing import GatewayThread
from harness.contracts.lock import InferenceLockV1
from harness.service.state_store import ServiceStateStore
from harness.store import model_files_dir

__all__ = [
    "FAKE",
    "IDLE_GROUP_KILL",
    "MODE_CHECKS",
    "FaultFront",
    "FaultSite",
    "assert_crashed",
    "engine_proxy_fixture",
    "fault_front",
    "fault_kind",
    "fault_site_fixture",
    "fault_summary",
    "failed_event",
    "revoked",
    "row",
    "sealed_inference_id",
    "serves",
    "service_failure_code",
    "stream",
]

FAKE = ("fake",)


def _saw(client: Any) -> str:
    if not isinstance(client, Mapping):
        return ""
    said = []
    for key, words in (("status", "HTTP {}"), ("next_request", "HTTP {} on the next request"), ("code", "{}")):
        if client.get(key) is not None:
            said.append(words.format(client[key]))
    flags = {"broken": "a broken stream", "closed_by_client": "its own close", "answered": "an answer", "idle": "nothing (idle)"}
    said += [words for key, words in flags.items() if client.get(key) is True]
    return ", ".join(said)


def fault_summary(d: Mapping[str, Any]) -> str:
    """A fault check's outcome in one sentence from what it recorded (``client``, ``evidence`` or
    ``failed_event``, ``recovery_ms``): the run page's line for it (``@check(..., summary=fault_summary)``)."""
    parts = []
    saw = _saw(d.get("client"))
    if saw:
        parts.append(f"the client saw {saw}")
    row, failed = d.get("evidence"), d.get("failed_event")
    if isinstance(row, Mapping) and row.get("status"):
        parts.append(f"the evidence row says {row['status']}" + (f" ({row['error_code']})" if row.get("error_code") else ""))
    if isinstance(failed, Mapping) and failed.get("code"):
        parts.append(f"the service failed with {failed['code']}")
    ms = d.get("recovery_ms")
    if isinstance(ms, int | float):
        parts.append(f"served again after {ms / 1000:.1f} s" if ms >= 1000 else f"served again after {ms:.0f} ms")
    return "; ".join(parts)


MODE_CHECKS = {
    "split_utf8": "faults.split_utf8.exact_bytes",
    "coalesce_events": "faults.coalesce_events.counted",
    "partial_event_close": "faults.partial_event_close.broken_stream",
    "inband_error": "faults.inband_error.chat",
    "connection_reset": "faults.connection_reset.broken_stream",
    "stall_mid_stream": "faults.stall_mid_stream.request_timeout",
    "slow_headers": "faults.slow_headers.request_timeout",
    "ignore_aborts": "faults.ignore_aborts.slot_unconfirmed",
    "oversized_response": "faults.oversized_response.size_cap",
    "crash_mid_stream": "faults.crash_mid_stream.service_failed",
    "exit_after_requests": "faults.exit_after_requests.service_failed",
    "exit_after_seconds": "faults.exit_after_seconds.idle_death",
    "wrong_model": "faults.wrong_model.refused",
    "startup_hang": "faults.startup_hang.start_timeout",
    "memory_growth": "faults.memory_growth.unconfirmed_oom",
    "slot_release_lag": "faults.slot_release_lag.flush_waits",
    "flush_refused": "faults.flush_refused.fails_readiness",
    "unparsed_tool_calls": "faults.unparsed_tool_calls.probe_refused",
    "response_model": "faults.response_model.identity_kept",
    "flip_token": "faults.flip_token.reproduction_differs",
}
# the outcome of SIGKILL to an idle real engine's group, handed from exit_after_seconds to memory_growth (on real
# SGLang both checks are that same fault: a kill from outside, no kernel OOM mark)
IDLE_GROUP_KILL = "idle_group_kill"
SHORT_TIMEOUT_MS = 2000  # a held request ends on the lock's request timeout, not on the check's patience
RESPONSE_CAP = 1 << 20


def serves(base_url: str, headers: dict[str, str], model: str) -> int:
    r = httpx.post(base_url + "/chat/completions", json=chat_body(model, stream=False), headers=headers, timeout=120)
    return r.status_code


def stream(
    base_url: str, route: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float = 120.0
) -> tuple[int, bytes, bool]:
    """(status, bytes, broken): broken when the chunked body ended without its terminator."""
    raw = b""
    with httpx.stream("POST", base_url + route, json=body, headers=headers, timeout=timeout_s) as r:
        try:
            for chunk in r.iter_raw():
                raw += chunk
        except httpx.RemoteProtocolError:
            return r.status_code, raw, True
        return r.status_code, raw, False


def row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(rows) == 1, rows
    return rows[0]


@dataclass
class FaultFront:
    """One run whose upstream carries a fault: the fake's fault modes, or the fault proxy before real SGLang."""

    env: CertifyEnv
    base_url: str
    token: str
    wire_model: str
    engine_url: str
    engine_key_headers: dict[str, str]
    binding_id: str
    state_dir: Path
    fake: Any = None  # FakeControl of the engine behind this front (fake engine only)
    proxy: FaultProxy | None = None
    gateway: GatewayThread | None = None  # a private gateway (None: the session daemon's)
    faults: list[str] = field(default_factory=list)
    t_fault_end: float = 0.0
    # (base URL, token) of a binding on the same gateway and upstream under the session lock's own request
    # timeout, for a front whose lock has the check's short one: that timeout is what the faulted request is
    # about; the recovery request is not, and a real engine on a loaded machine may need longer to answer it
    recovery: tuple[str, str] | None = field(default=None, repr=False)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def arm(self, fake: tuple[str, ...], proxy: tuple[ProxyFault, ...]) -> None:
        """The fault: ``fake`` (the fake engine's fault specs) or ``proxy`` (real SGLang behind the proxy)."""
        if self.proxy is not None:
            self.proxy.arm(*proxy)
            self.faults = [f.model_dump_json(exclude_defaults=True) for f in proxy]
        else:
            self.fake.faults(*fake)
            self.faults = list(fake)

    def clear(self) -> None:
        if self.proxy is not None:
            self.proxy.clear()
        else:
            self.fake.faults()

    def chat_stream(self) -> tuple[int, bytes, bool]:
        got = stream(self.base_url, "/chat/completions", chat_body(self.wire_model, stream=True), self.headers())
        self.t_fault_end = time.monotonic()
        return got

    def stream(self, route: str, body: dict[str, Any]) -> tuple[int, bytes, bool]:
        got = stream(self.base_url, route, body, self.headers())
        self.t_fault_end = time.monotonic()
        return got

    def unary_chat(self) -> httpx.Response:
        body = chat_body(self.wire_model, stream=False)
        r = httpx.post(self.base_url + "/chat/completions", json=body, headers=self.headers(), timeout=120)
        self.t_fault_end = time.monotonic()
        return r

    def rows(self, at_least: int = 1) -> list[dict[str, Any]]:
        if self.gateway is not None:
            self.gateway.settle_evidence()
        return evidence_rows(self.state_dir, self.binding_id, at_least)

    def upstream_posts(self) -> int:
        """Inference requests the engine was sent (a POST is never retried)."""
        if self.proxy is not None:
            return sum(1 for e in self.proxy.exchanges() if e.method == "POST" and e.path.startswith("/v1/"))
        return sum(1 for r in self.fake.posts() if r["path"].startswith("/v1/"))

    def engine_idle(self) -> None:
        """No request left running in the engine (SGLang's load snapshot lags: polled)."""
        wait_until(lambda: engine_load(self.engine_url, self.engine_key_headers) == 0, 30.0, what="engine slot freed")

    def permits_released(self, acquired: int) -> None:
        """Every gateway permit of this front released exactly once (a private gateway only: the session
        daemon's gateway is shared with other runs)."""
        gw = self.gateway
        if gw is not None:
            wait_until(lambda: queue_counts(gw) == (acquired, acquired, 0, 0), 10.0, what="permits released once")

    def another_run(self, run_id: str, deadline_s: float | None = None) -> RunHandle:
        """Another run on this front's private gateway, with its upstream and lock (runs sharing one service);
        ``deadline_s``: the run's candidate deadline."""
        gw = self.gateway
        assert gw is not None, "only a private front's gateway takes more runs"
        binding = gw.call(lambda: gw.gw.registry.get(self.binding_id))
        assert binding is not None
        return run_handle(gw, gw.register(run_id, binding.target, deadline_s=deadline_s))

    def record(self, certify_record: Any, client: dict[str, Any], evidence: dict[str, Any]) -> None:
        """What the run page shows per fault: the fault, what the client saw, the evidence row."""
        certify_record.detail("fault", {"via": "proxy" if self.proxy is not None else "fake engine", "spec": self.faults})
        certify_record.detail("client", client)
        certify_record.detail("evidence", {k: evidence.get(k) for k in ("status", "error_code", "http_status")})

    def bad_gateway(self, certify_record: Any) -> None:
        """A unary request the fault ends before an answer: 502 inference_upstream_failed, evidence failed, recovered."""
        r = self.unary_chat()
        got = row(self.rows())
        self.record(certify_record, {"status": r.status_code, "code": r.json()["error"]["code"]}, got)
        assert (r.status_code, r.json()["error"]["code"]) == (502, "inference_upstream_failed")
        assert (got["status"], got["error_code"]) == ("failed", "inference_upstream_failed")
        self.recovered(certify_record)

    def recovered(self, certify_record: Any, acquired: int = 1) -> None:
        """Nothing left held; with the fault cleared the same front serves again; record how long that took."""
        self.permits_released(acquired)
        self.engine_idle()
        self.clear()
        base_url, token = self.recovery or (self.base_url, self.token)
        assert serves(base_url, {"Authorization": f"Bearer {token}"}, self.wire_model) == 200
        certify_record.detail("recovery_ms", round((time.monotonic() - self.t_fault_end) * 1000, 1))


@contextlib.contextmanager
def fault_front(
    env: CertifyEnv,
    workdir: Path,
    proxy: FaultProxy | None,
    *,
    private: bool = False,
    timeout_ms: int | None = None,
    execution: dict[str, Any] | None = None,
    gateway_settings: dict[str, Any] | None = None,
    generation: dict[str, Any] | None = None,
) -> Iterator[FaultFront]:
    """A front for one check. ``private`` (fake engine): a private fake engine and gateway (short request
    timeout, 1 MiB response cap, one running request); on SGLang every front is private (the proxy's).
    ``execution`` changes the front's lock (its short timeouts: idle, abort confirmation), ``generation`` its
    generation settings (a benchmark control that fixes an output length), ``gateway_settings`` the private
    gateway's (its queue bound)."""
    lock = session_lock(env)
    front_lock = lock.model_copy(update={"generation": lock.generation.model_copy(update=generation or {})})
    updates: dict[str, Any] = {} if timeout_ms is None else {"request_timeout_ms": timeout_ms}
    updates.update(execution or {})
    gateway_config: dict[str, Any] = {"max_response_bytes": RESPONSE_CAP, **(gateway_settings or {})}
    tokenizer_dir = model_files_dir(env.root, lock.model_id)
    with contextlib.ExitStack() as held:  # left in reverse: the fault cleared, then the run or gateway gone
        if env.engine == "fake" and not private:
            assert env.fake is not None and not generation, "a front with its own generation settings is private"
            run = env.new_run()
            held.callback(env.delete_run, run)
            env.fake.reset()
            held.callback(env.fake.reset)
            yield FaultFront(
                env, run.base_url, run.token, run.wire_model, env.engine_url, env.engine_headers(), run.binding_id,
                env.root.gateway_dir, fake=env.fake,
            )  # fmt: skip
        elif env.engine == "fake":
            private_lock = front_lock.model_copy(
                update={"execution": lock.execution.model_copy(update={**updates, "max_running_requests": 1})}
            )
            running = PrivateStack.running(tokenizer_dir, workdir, private_lock, max_running=1, **gateway_config)
            stack = held.enter_context(running)
            recovery = None
            if updates:
                recovery = _recovery(
                    stack.gateway, "certify-private-recovery", stack.engine.base, stack.engine.key, lock, stack.run.wire_model,
                    tokenizer_dir,
                )  # fmt: skip
            yield FaultFront(
                env, stack.run.base_url, stack.run.token, stack.run.wire_model, stack.engine.base, stack.engine_headers(),
                stack.run.binding_id, stack.state_dir, fake=stack.engine.control, gateway=stack.gateway, recovery=recovery,
            )  # fmt: skip
        else:
            assert proxy is not None and proxy.alive()
            proxy.clear()
            proxy.wait(lambda s: s.open_connections == 0, what="the previous check's connections to close")
            proxy.forget()
            variant = front_lock.model_copy(update={"execution": lock.execution.model_copy(update=updates)})
            state_dir = workdir / "gateway"
            config = GatewayConfig(state_dir=state_dir, metrics_port=None, **gateway_config)
            gateway = held.enter_context(GatewayThread(config))
            held.callback(proxy.clear)
            record = bind_upstream(
                gateway, "certify-proxy-run", proxy.base, env.engine_key, variant, env.run.wire_model, tokenizer_dir
            )
            recovery = None
            if updates:
                recovery = _recovery(
                    gateway, "certify-proxy-recovery", proxy.base, env.engine_key, lock, env.run.wire_model, tokenizer_dir
                )
            yield FaultFront(
                env, record.base_url, gateway.token_of(record), env.run.wire_model, env.engine_url, env.engine_headers(),
                record.binding_id, state_dir, proxy=proxy, gateway=gateway, recovery=recovery,
            )  # fmt: skip


def _recovery(
    gateway: GatewayThread,
    run_id: str,
    upstream: str,
    engine_key: str,
    lock: InferenceLockV1,
    wire_model: str,
    tokenizer_dir: Path,
) -> tuple[str, str]:
    """(base URL, token) of a second run on ``gateway`` and ``upstream`` under the session lock's own request timeout."""
    record = bind_upstream(gateway, run_id, upstream, engine_key, lock, wire_model, tokenizer_dir)
    return record.base_url, gateway.token_of(record)


# -- faults that kill or refuse an engine: the private daemon ---------------------------------------------


def sealed_inference_id(daemon: PrivateDaemon) -> str:
    """The private root's sealed lock: copied from the session, else sealed by one run (an engine start)."""
    inference_id = daemon.body.get("inference_id")
    if inference_id is None:
        base = daemon.create_run()
        inference_id = base.inference_id
        daemon.delete_run(base)
    return str(inference_id)


def failed_event(
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


def service_failure_code(daemon: PrivateDaemon, inference_id: str, timeout_s: float) -> str | None:
    """The failure code the supervisor recorded for any service of ``inference_id`` (None if none failed)."""

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


def revoked(run: RunHandle, timeout_s: float = 10.0) -> dict[str, Any]:
    """The run's next request, once the binding is revoked: 403 inference_binding_revoked."""

    def probe() -> dict[str, Any] | None:
        r = httpx.post(
            run.base_url + "/chat/completions", json=chat_body(run.wire_model, stream=False), headers=run.headers(), timeout=30
        )
        return {"status": r.status_code, "code": r.json()["error"]["code"]} if r.status_code == 403 else None

    return wait_until(probe, timeout_s, interval_s=0.1, what="the binding to be revoked")


def assert_crashed(
    daemon: PrivateDaemon, run: RunHandle, engine: EngineTarget, code: str, need: tuple[str, ...] = ("code",)
) -> dict[str, Any]:
    """The epoch failed with ``code``, the service is failed or stopped, the binding revoked, the engine gone."""
    details = failed_event(daemon, run.service_id, run.epoch, timeout_s=30.0, need=need)
    assert details.get("code") == code, details
    record = daemon.record(run.service_id)
    assert record is not None and record.state in ("failed", "stopped") and record.epoch == run.epoch
    assert revoked(run) == {"status": 403, "code": "inference_binding_revoked"}
    wait_until(lambda: not engine.alive(), 30.0, what="the engine gone")
    daemon.runs.pop(run.run_id, None)
    return details


@dataclass
class FaultSite:
    """Where a check's fronts are made: the session, the module's proxy (SGLang) and the check's tmp dir."""

    env: CertifyEnv
    proxy: FaultProxy | None
    workdir: Path

    def front(
        self,
        *,
        private: bool = False,
        timeout_ms: int | None = None,
        execution: dict[str, Any] | None = None,
        gateway_settings: dict[str, Any] | None = None,
        generation: dict[str, Any] | None = None,
    ) -> contextlib.AbstractContextManager[FaultFront]:
        return fault_front(
            self.env, self.workdir, self.proxy, private=private, timeout_ms=timeout_ms, execution=execution,
            gateway_settings=gateway_settings, generation=generation,
        )  # fmt: skip


@pytest.fixture(name="fault_site")
def fault_site_fixture(certify_env: CertifyEnv, engine_proxy: FaultProxy | None, tmp_path: Path) -> FaultSite:
    return FaultSite(certify_env, engine_proxy, tmp_path)


@pytest.fixture(scope="module", name="engine_proxy")
def engine_proxy_fixture(certify_env: CertifyEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultProxy | None]:
    """Real SGLang: one fault proxy in front of the session's engine for the module (None on the fake)."""
    if certify_env.engine == "fake":
        yield None
        return
    with start_fault_proxy(certify_env.engine_url, tmp_path_factory.mktemp("fault-proxy")) as px:
        yield px


def fault_kind(kind: str) -> Any:
    """An autouse fixture recording the module's kind of fault (``details.fault_kind``: the run page groups by it)."""

    @pytest.fixture(autouse=True)
    def _fault_kind(certify_record: Any) -> None:
        certify_record.detail("fault_kind", kind)

    return _fault_kind
