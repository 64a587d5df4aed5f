"""agents.harbor: Harbor trials on the local model through the gateway (spec §15.3 "Linux Harbor local-docker").

Real Harbor (its private venv, ``hitch eval harbor install``), real Docker trials of the local task set
(``fixtures/harbor_tasks``, ``FROM hitch/harbor-base:dev``), trials driven through Harbor's Python API by
:class:`harness.evals.harbor_run.HarborEvaluation` against the session's daemon: one run binding per trial.

Every evaluation leases the session's own service (its ``inference_id``): no engine is started for it.

- ``agents.harbor.shared_service``: two in-container trials at once (``ShellAgent``, whose model call is
  made from inside the trial container through the container-facing binding) are two bindings of the
  session's service, and both rewards are recorded (on the fake, scripted to solve the task: 1.0).
- ``agents.harbor.container_isolation``: from inside each of those trial containers, neither the engine
  (its own address, its port on the eval network's host address) accepts a connection, nor does another
  run's binding on the same gateway listener accept the trial's key.
- ``agents.harbor.cancel_isolated`` (both engines): ``terminus-2`` on two tasks; the victim is cancelled
  while its model request is held in flight: its run ends ``cancelled`` with that exchange recorded
  ``cancelled``, the engine has no request open, the baseline's one running slot answers a new request, and
  the other trial's requests and reward are intact. On the fake the fake holds the victim's request
  (``slow_headers`` matching its task). On real SGLang the engine holds it: paused in place first (SGLang's
  admin ``/pause_generation``, mode ``in_place``: requests are taken in, nothing is generated), the victim's
  trial starts alone, and once SGLang's HTTP layer holds its chat request (``sglang:http_requests_active``
  is 1; the only trial running, and nothing completes while paused) the other trial starts beside it and
  the victim is cancelled; the engine resumes once the gateway has let the victim's request go and waits for
  its slot (``hitch_gateway_aborts_confirming``): SGLang holds a request that arrived while paused before its
  scheduler sees it, so only the resumed engine aborts it and publishes the load snapshot that shows the slot
  free. The other trial's reward is the model's own (recorded as earned).
- ``agents.harbor.terminus_solves`` (fake): in that evaluation ``terminus-2`` solved its task (reward 1.0)
  through the gateway on loopback with the scripted terminus answers — model, agent, container and
  verifier in one loop.
- ``agents.harbor.real_model`` (real SGLang): ``terminus-2`` on two local tasks at once; every trial ends,
  through the gateway, with complete evidence, and the rewards the model earns are recorded as they are —
  the check claims the loop ran, not that the model is good.

Each check's outcome is recorded in the root's compatibility profile of the agent it ran
(:func:`harness.evals.harbor_agents.record_agent_result`: ``ShellAgent`` for the first two, ``terminus-2`` for
the others): ``hitch eval harbor run --agent X`` admits only an agent whose profile for the engine passed.

The checks that script or fault the shared fake hold the engine alone (``engine_turn``) while they do.
Required where Docker and Harbor are present (and always under ``HITCH_REQUIRE_HARBOR``): a missing
component skips them elsewhere, and fails them under ``HITCH_REQUIRE_HARBOR`` / ``HITCH_REQUIRE_DOCKER``.
Under xdist the evaluations run once per session (a file mutex; the other worker reads the result).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import pytest
from filelock import FileLock

from certify.components import missing
from certify.kit.probes import engine_load, wait_for
from certify.kit.white_box import probe_docker
from certify.registry import Summary, check
from certify.session import CertifyEnv
from certify.turns import engine_turn
from fixtures.fake_sglang.client import FakeControl
from harness.app.locks import sealed_lock
from harness.app.requests import RunRequest, parse_request
from harness.errors import HitchError
from harness.evals.harbor_agents import SHELL_AGENT, TERMINUS, agent_key, record_agent_result
from harness.evals.harbor_install import HarborInstall, harbor_install
from harness.evals.harbor_run import EvalOptions, HarborEvaluation, base_image_id
from harness.paths import HitchRoot, ensure_private_dir
from harness.settings import settings

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "fixtures" / "harbor_tasks"
_SOLVE_CREATE = "echo 'hello from hitch' > /app/hello.txt"
# terminus-2's JSON answer that solves create-file (terminus asks to confirm; the same answer confirms)
_TERMINUS_TURN = {
    "analysis": "The file does not exist yet.",
    "plan": "Write the line into /app/hello.txt.",
    "commands": [{"keystrokes": _SOLVE_CREATE + "\n", "duration": 0.3}],
    "task_complete": True,
}
_VICTIM_NEEDLE = "calc.py"  # in fix-one-line's instruction only: the fake holds that trial's model requests
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
F = TypeVar("F", bound=Callable[..., Any])


def _expected() -> bool:
    """Required where Docker and Harbor are present, or where CI requires Harbor."""
    if settings().requires("harbor"):
        return True
    return shutil.which("docker") is not None and harbor_install(HitchRoot.at()) is not None


REQUIRED = _expected()
_FAKE_ONLY = "scripted model turns: a real model's answers are not the check's to choose (real SGLang: agents.harbor.real_model)"


@pytest.fixture(scope="module")
def harbor(certify_env: CertifyEnv) -> HarborInstall:
    facts = probe_docker()
    if not facts.reachable:
        missing("docker", f"Harbor trials need a reachable Docker engine: {facts.reason}")
    found = harbor_install(certify_env.root)
    if found is None:
        missing("harbor", f"Harbor is not installed under {certify_env.root.path} (hitch eval harbor install)")
    try:
        base_image_id()
    except HitchError as exc:
        missing("harbor", exc.message)
    return found


@contextlib.contextmanager
def _profiled(env: CertifyEnv, harbor: HarborInstall, agent: str, check_id: str) -> Iterator[None]:
    """Record the check's outcome (passed when the block ends without an error) in the agent's profile."""
    lock = sealed_lock(env.root, env.run.inference_id)
    key = agent_key(agent, str(harbor.versions.get("harbor", "unknown")), lock.runtime_id, lock.model_id, [REPO])
    passed = False
    try:
        yield
        passed = True
    finally:
        record_agent_result(env.root, agent, key, check_id, env.engine, env.device, passed)


def _once(env: CertifyEnv, name: str, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``compute()`` once per certify session (keyed by the session's service), shared by xdist workers."""
    folder = ensure_private_dir(env.root.certify / "harbor")
    key = f"{name}-{env.run.service_id}-{env.run.epoch}"
    out = folder / f"{key}.json"
    with FileLock(str(folder / f"{key}.lock")):
        if out.is_file():
            kept: dict[str, Any] = json.loads(out.read_text())
            return kept
        result = compute()
        out.write_text(json.dumps(result))
    return result


def _pinned(env: CertifyEnv) -> RunRequest:
    """A run request that leases the session's service (its inference id, its engine choice)."""
    return parse_request(RunRequest, {**env.body, "inference_id": env.run.inference_id, "capture": "metadata"})


def _turns(text: str, n: int = 48) -> list[dict[str, Any]]:
    return [{"text": text}] * n


def _execution(root: HitchRoot, run_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root.run_inference_dir(run_id) / "execution.json").read_text())
    return data


def _network_gateway(network_id: str) -> str:
    import docker

    client = docker.from_env()
    try:
        attrs = client.api.inspect_network(network_id)
        return str(next(c["Gateway"] for c in attrs["IPAM"]["Config"] if ":" not in c["Subnet"]))
    finally:
        client.close()


def _in_container(env: CertifyEnv, harbor: HarborInstall) -> dict[str, Any]:
    """Two ShellAgent trials at once on the session's service, each probing the engine and another run's
    binding from inside its container (on the fake, the model's answer is scripted to solve the task)."""
    tag = secrets.token_hex(4)
    image = base_image_id()
    body = _pinned(env)
    fields = {**body.body(), "run_id": f"cert-harbor-sib-{tag}", "for_containers": True, "eval_image": image}
    sibling = env.daemon.create_run(parse_request(RunRequest, fields))
    try:
        if env.fake is not None:
            env.fake.script(_turns(_SOLVE_CREATE))
        engine = urlsplit(env.engine_url)
        targets = [f"{_network_gateway(sibling['eval_network_id'])}:{engine.port}"]
        if engine.hostname not in _LOOPBACK:
            targets.insert(0, f"{engine.hostname}:{engine.port}")
        foreign = f"{sibling['base_url']}/models"
        kwargs: dict[str, Any] = {"probe_tcp": targets, "probe_urls": [foreign]}
        if env.fake is None:
            # one shell command fits in 32 tokens; the two trials share one engine slot, and SmolLM2 on a busy
            # 2-core CPU writing the agent's default 128 tokens held it past the other trial's 60 s permit wait
            kwargs["max_tokens"] = 32
        options = EvalOptions(
            [TASKS / "create-file"], agent=SHELL_AGENT, k=2, n_concurrent=2, evaluation_id=f"cert-inside-{tag}",
            agent_kwargs=kwargs, eval_image=image, agent_paths=[REPO], certifying=True,
        )  # fmt: skip
        evaluation = HarborEvaluation(env.root, harbor, env.daemon, body, options)
        record = evaluation.run()
        probes = {}
        for t in record.trials:
            found = evaluation.dir / "trials" / t.trial / "agent" / "probe.json"
            probes[t.trial] = json.loads(found.read_text()) if found.is_file() else None
        return {
            "record": record.to_json_dict(),
            "probes": probes,
            "targets": targets,
            "foreign": foreign,
            "session": [env.run.service_id, env.run.epoch],
            "sibling_binding": sibling["binding_id"],
        }
    finally:
        if env.fake is not None:
            env.fake.script([])
        env.daemon.delete_run(sibling["run_id"])


def _chat_active(env: CertifyEnv) -> int:
    r = httpx.get(env.engine_url + "/metrics", headers=env.engine_headers(), timeout=10, trust_env=False)
    r.raise_for_status()
    for line in r.text.splitlines():
        if line.startswith("sglang:http_requests_active{") and 'endpoint="/v1/chat/completions"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def _aborts_confirming(env: CertifyEnv) -> int:
    """Abandoned requests of the session's service epoch whose permit waits for the engine to show the slot free
    (the daemon gateway's ``hitch_gateway_aborts_confirming``)."""
    url = env.daemon.status()["gateway"]["metrics_url"]
    r = httpx.get(url, timeout=10, trust_env=False)
    r.raise_for_status()
    series = f'hitch_gateway_aborts_confirming{{service="{env.run.service_id}#{env.run.epoch}"}} '
    return next((int(float(line[len(series) :])) for line in r.text.splitlines() if line.startswith(series)), 0)


def _held_snapshot(env: CertifyEnv, control: FakeControl) -> tuple[int, int] | None:
    """(requests logged, requests served) while a chat request is inside the fake but in none of its slots
    (held by ``slow_headers``; the gateway's one running slot is then taken by it); None otherwise."""
    state = control.state()
    if _chat_active(env) < 1 or state["num_running_reqs"] != 0 or state["num_queue_reqs"] != 0:
        return None
    logged = [r for r in control.received() if not r["path"].startswith(("/metrics", "/ready"))]  # our own polls
    return len(logged), int(state["requests_served"])


def _cancel_mid_request(env: CertifyEnv, harbor: HarborInstall, control: FakeControl) -> dict[str, Any]:
    """terminus-2 on fix-one-line (the victim: the fake holds its model requests) and create-file at once
    on the session's service; the victim is cancelled while its request is in flight."""
    tag = secrets.token_hex(4)
    control.reset()
    control.script(_turns(json.dumps(_TERMINUS_TURN)))
    control.faults(f"slow_headers:t=900,match={_VICTIM_NEEDLE}")
    out: dict[str, Any] = {"session": [env.run.service_id, env.run.epoch]}
    try:
        options = EvalOptions(
            [TASKS / "fix-one-line", TASKS / "create-file"],
            k=1,
            n_concurrent=2,
            evaluation_id=f"cert-cancel-{tag}",
            certifying=True,
        )
        evaluation = HarborEvaluation(env.root, harbor, env.daemon, _pinned(env), options)
        victim = evaluation.trials[0].name
        cancelled, over = threading.Event(), threading.Event()

        def cancel_when_held() -> None:
            # a condition, not a race: the held request stays held until it is cancelled, so the same
            # snapshot seen twice (nothing logged or served in between) is that request, not a passing one
            last = None
            try:
                while not over.wait(0.05):
                    now = _held_snapshot(env, control)
                    if now is not None and now == last:
                        out["cancel_sent"] = evaluation.cancel(victim)
                        cancelled.set()
                        return
                    last = now
            except Exception as exc:  # the check reports it (cancelled_while_held stays False)
                out["watch_error"] = f"{type(exc).__name__}: {exc}"

        def on_event(event: dict[str, Any]) -> None:
            if event.get("event") == "started" and event.get("trial") == victim:
                threading.Thread(target=cancel_when_held, daemon=True).start()

        try:
            record = evaluation.run(on_event)
        finally:
            over.set()
        out["record"] = record.to_json_dict()
        out["cancelled_while_held"] = cancelled.is_set()
        out["execution"] = {t.run_id: _execution(env.root, t.run_id)["attempts"] for t in record.trials}
        control.faults()
        fresh = env.new_run(f"cert-harbor-after-{tag}")
        req = {"model": fresh.wire_model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        # with the baseline's one running slot this is answered only if the cancelled request left it
        r = httpx.post(f"{fresh.base_url}/chat/completions", json=req, headers=fresh.headers(), timeout=300, trust_env=False)
        out["after_cancel_status"] = r.status_code
        out["epoch_after"] = fresh.epoch
        out["chat_active_after"] = _chat_active(env)
        out["fake_state"] = control.state()
        return out
    finally:
        control.script([])
        control.reset()


# The real-model trials' agent budget: the tasks' own 180 s is for a person's runs; here a trial that has not
# finished by then ends as Harbor's timeout (status failed, its evidence complete) — what the check asserts.
# On a 2-core CPU both SmolLM2 trials ran into the 180 s (after 1 and 3 model calls) and into 90 s (after 1 and 2,
# each still generating its answer when the budget ended); a trial's first model call leaves within 5 s of its
# start (agent and environment setup are outside the budget), so 40 s shows the same and holds the session's
# engine for 100 s less (this budget runs twice, both times with the engine to itself). The record states it.
REAL_AGENT_TIMEOUT_S = 40.0


def _real_model(env: CertifyEnv, harbor: HarborInstall) -> dict[str, Any]:
    """terminus-2 on two local tasks at once on the session's service (real SGLang)."""
    tag = secrets.token_hex(4)
    options = EvalOptions(
        [TASKS / "create-file", TASKS / "read-then-write"], k=1, n_concurrent=2, evaluation_id=f"cert-real-{tag}",
        agent_kwargs={"max_turns": 4}, agent_timeout_s=REAL_AGENT_TIMEOUT_S, certifying=True,
    )  # fmt: skip
    record = HarborEvaluation(env.root, harbor, env.daemon, _pinned(env), options).run()
    return {"record": record.to_json_dict(), "session": [env.run.service_id, env.run.epoch]}


@pytest.fixture(scope="module")
def inside(request: pytest.FixtureRequest, certify_env: CertifyEnv, harbor: HarborInstall) -> dict[str, Any]:
    with engine_turn(request.config, exclusive=True):  # it scripts the shared fake engine
        return _once(certify_env, "inside", lambda: _in_container(certify_env, harbor))


def _engine_admin(env: CertifyEnv, route: str, body: dict[str, Any]) -> None:
    """POST an admin route of the session's real engine (its admin key: the service's private key file)."""
    key = (env.root.private / env.run.service_id / "admin-api-key").read_text(encoding="utf-8").strip()
    r = httpx.post(env.engine_url + route, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60, trust_env=False)
    assert r.status_code == 200, f"{route}: HTTP {r.status_code} {r.text[:200]}"


def _cancel_held_real(env: CertifyEnv, harbor: HarborInstall) -> dict[str, Any]:
    """The real engine's version of :func:`_cancel_mid_request` (see the module doc): the engine paused in place
    holds the victim's request; the other trial starts beside it; the victim is cancelled; the engine resumes."""
    tag = secrets.token_hex(4)

    def evaluation(task: str) -> HarborEvaluation:
        options = EvalOptions(
            [TASKS / task], k=1, n_concurrent=1, evaluation_id=f"cert-cancel-{task}-{tag}",
            agent_kwargs={"max_turns": 4}, agent_timeout_s=REAL_AGENT_TIMEOUT_S, certifying=True,
        )  # fmt: skip
        return HarborEvaluation(env.root, harbor, env.daemon, _pinned(env), options)

    victim_eval, other_eval = evaluation("fix-one-line"), evaluation("create-file")
    victim = victim_eval.trials[0].name
    records: dict[str, Any] = {}
    other_started = threading.Event()

    def run(name: str, ev: HarborEvaluation, on_event: Callable[[dict[str, Any]], None] | None = None) -> None:
        try:
            records[name] = ev.run(on_event)
        except Exception as exc:  # the check reports it
            records[name] = f"{type(exc).__name__}: {exc}"

    def seen(event: dict[str, Any]) -> None:
        if event.get("event") == "started":
            other_started.set()

    out: dict[str, Any] = {"session": [env.run.service_id, env.run.epoch], "cancel_sent": False, "held": False}
    threads = [threading.Thread(target=run, args=("victim", victim_eval), daemon=True)]
    _engine_admin(env, "/pause_generation", {"mode": "in_place"})
    try:
        threads[0].start()
        # the victim is the only trial and the engine generates nothing: its first chat request, once the
        # engine's HTTP layer holds it, stays there until the cancel
        out["held"] = wait_for(lambda: _chat_active(env) == 1 or not threads[0].is_alive(), 600, 0.1)
        out["held"] = out["held"] and threads[0].is_alive()
        if out["held"]:
            threads.append(threading.Thread(target=run, args=("other", other_eval, seen), daemon=True))
            threads[1].start()
            out["other_started"] = other_started.wait(600)
            if out["other_started"]:
                out["cancel_sent"] = victim_eval.cancel(victim)
                # the engine resumes once the gateway has let the victim's request go (it closed the engine
                # connection and waits for the slot to show free, spec §9.2). SGLang's HTTP layer holds a request
                # that arrived while paused before its scheduler sees it, with no disconnect check: only a resumed
                # engine aborts it and publishes the load that shows the slot free
                out["gateway_let_go"] = wait_for(lambda: _aborts_confirming(env) >= 1, 120, 0.1)
    finally:
        _engine_admin(env, "/continue_generation", {})
    out["engine_let_go"] = wait_for(lambda: _chat_active(env) == 0, 60, 0.1)
    threads[0].join(600)
    for thread in threads:
        thread.join(900)
    out["cancelled_while_held"] = bool(out["held"] and out["cancel_sent"])
    out["evaluations"] = {name: rec if isinstance(rec, str) else "finished" for name, rec in records.items()}
    trials = [t for rec in records.values() if not isinstance(rec, str) for t in rec.trials]
    out["record"] = {"agent": "terminus-2", "trials": [t.to_json_dict() for t in trials]}
    out["execution"] = {t.run_id: _execution(env.root, t.run_id)["attempts"] for t in trials}
    fresh = env.new_run(f"cert-harbor-after-{tag}")
    req = {"model": fresh.wire_model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    # with the baseline's one running slot this is answered only if the cancelled request left it
    r = httpx.post(f"{fresh.base_url}/chat/completions", json=req, headers=fresh.headers(), timeout=300, trust_env=False)
    out["after_cancel_status"] = r.status_code
    out["epoch_after"] = fresh.epoch
    out["chat_active_after"] = _chat_active(env)
    out["engine_load_after"] = engine_load(env.engine_url, env.engine_headers())
    return out


@pytest.fixture(scope="module")
def cancel(request: pytest.FixtureRequest, certify_env: CertifyEnv, harbor: HarborInstall) -> dict[str, Any]:
    control = certify_env.fake
    with engine_turn(request.config, exclusive=True):  # faults, script and request log of the shared fake
        if control is not None:
            return _once(certify_env, "cancel", lambda: _cancel_mid_request(certify_env, harbor, control))
        if certify_env.engine == "fake":
            pytest.skip("needs the fake engine's control channel (a process-launched contract session)")
        return _once(certify_env, "cancel-real", lambda: _cancel_held_real(certify_env, harbor))


def _trials(result: dict[str, Any]) -> list[dict[str, Any]]:
    trials: list[dict[str, Any]] = result["record"]["trials"]
    return trials


def _timings(certify_record: Any, result: dict[str, Any]) -> None:
    for t in _trials(result):
        certify_record.detail(f"trial {t['trial']}", {k: t.get(k) for k in ("status", "reward", "usage", "timing")})


@check(
    "agents.harbor.shared_service",
    required=REQUIRED,
    description="two Harbor trials at once (model calls from inside their containers) are two bindings of the "
    "session's one service, and both rewards are recorded (needs Docker and Harbor)",
    summary=lambda d: (
        "two Harbor trials at once ran as two bindings of the session's one service; rewards "
        + ", ".join(str(v.get("reward")) for k, v in d.items() if k.startswith("trial "))
    ),
)
def test_harbor_trials_share_one_service(
    certify_env: CertifyEnv, harbor: HarborInstall, inside: dict[str, Any], certify_record: Any
) -> None:
    with _profiled(certify_env, harbor, SHELL_AGENT, "agents.harbor.shared_service"):
        _shared_service(certify_env, inside, certify_record)


def _shared_service(certify_env: CertifyEnv, inside: dict[str, Any], certify_record: Any) -> None:
    _timings(certify_record, inside)
    trials = _trials(inside)
    assert inside["record"]["model_connection"] == "container"
    assert len(trials) == 2 and [t["status"] for t in trials] == ["completed", "completed"], trials
    assert all(t["reward"] is not None for t in trials), "both rewards are recorded"
    if certify_env.engine == "fake":  # the scripted answer solves the task
        assert [t["reward"] for t in trials] == [1.0, 1.0]
    assert {(t["service"]["service_id"], t["service"]["epoch"]) for t in trials} == {tuple(inside["session"])}
    assert all(t["service"]["reused_service"] for t in trials), "no engine started for the trials"
    bindings = {t["binding_id"] for t in trials}
    assert len(bindings) == 2 and inside["sibling_binding"] not in bindings
    for t in trials:
        assert t["usage"]["requests"] == 1 and t["usage"]["evidence_complete"] is True


@check(
    "agents.harbor.container_isolation",
    required=REQUIRED,
    description="from inside a Harbor trial container neither the engine nor another run's binding is reachable; "
    "its own binding is (needs Docker and Harbor)",
    summary=lambda d: (
        f"from inside {len(d['probes'])} trial containers the engine refused every connection and another "
        "run's binding answered 401"
    ),
)
def test_harbor_trial_container_reaches_only_its_binding(
    certify_env: CertifyEnv, harbor: HarborInstall, inside: dict[str, Any], certify_record: Any
) -> None:
    with _profiled(certify_env, harbor, SHELL_AGENT, "agents.harbor.container_isolation"):
        _container_isolation(inside, certify_record)


def _container_isolation(inside: dict[str, Any], certify_record: Any) -> None:
    certify_record.detail("probes", {k: {"tcp": v["tcp"], "urls": v["urls"]} for k, v in inside["probes"].items() if v})
    probes = inside["probes"]
    assert len(probes) == 2
    for probe in probes.values():
        assert probe is not None and probe["status"] == 200, "the trial's own binding answered from its container"
        assert [row["target"] for row in probe["tcp"]] == inside["targets"]
        assert not any(row["connected"] for row in probe["tcp"]), probe["tcp"]
        (foreign,) = probe["urls"]
        assert foreign["url"] == inside["foreign"]
        assert foreign["status"] == 401 and foreign["code"] == "inference_token_invalid", foreign


def _scripted_check(check_id: str, description: str, summary: Summary = None) -> Callable[[F], F]:
    """A check that needs the fake engine's scripted turns or faults."""
    return check(check_id, required=REQUIRED, engines=("fake",), reason=_FAKE_ONLY, description=description, summary=summary)


def _cancel_summary(d: Any) -> str:
    victim = next((v for k, v in d.items() if k.startswith("trial ") and v.get("status") == "cancelled"), None)
    others = [v for k, v in d.items() if k.startswith("trial ") and v is not victim]
    other = others[0] if others else {}
    return (
        f"a Harbor trial cancelled while its model request was held ended cancelled; the trial beside it ended "
        f"{other.get('status')} (reward {other.get('reward')}) and the engine slot answered the next request"
    )


@check(
    "agents.harbor.cancel_isolated",
    required=REQUIRED,
    description="cancelling one Harbor trial mid-request frees its slot and leaves the other trial's requests "
    "and reward intact (needs Docker and Harbor)",
    summary=_cancel_summary,
)
def test_harbor_cancel_mid_request_is_isolated(
    certify_env: CertifyEnv, harbor: HarborInstall, cancel: dict[str, Any], certify_record: Any
) -> None:
    with _profiled(certify_env, harbor, TERMINUS, "agents.harbor.cancel_isolated"):
        _cancel_isolated(certify_env, cancel, certify_record)


def _cancel_isolated(certify_env: CertifyEnv, cancel: dict[str, Any], certify_record: Any) -> None:
    _timings(certify_record, cancel)
    certify_record.detail("attempts", cancel["execution"])
    if certify_env.engine != "fake":
        certify_record.detail("agent_timeout_s", REAL_AGENT_TIMEOUT_S)
    for key in ("held", "other_started", "gateway_let_go", "engine_let_go", "evaluations"):
        if key in cancel:
            certify_record.detail(f"hold.{key}", cancel[key])
    assert cancel["cancelled_while_held"] is True and cancel["cancel_sent"] is True, cancel.get("watch_error") or cancel
    assert cancel.get("gateway_let_go", True) is True, "the gateway never abandoned the cancelled request at the engine"
    victim, other = _trials(cancel)
    assert victim["task"] == "fix-one-line" and victim["status"] == "cancelled" and victim["reward"] is None
    assert victim["error"]["code"] == "run_cancelled"
    held = cancel["execution"][victim["run_id"]]
    assert held["rows"] >= 1 and held["begun"] == held["rows"], "the exchange in flight at the cancel is recorded"
    assert held["by_status"].get("cancelled", 0) >= 1 and "completed" not in held["by_status"], held["by_status"]
    assert cancel["after_cancel_status"] == 200, "the gateway's running slot was not freed"
    assert cancel["epoch_after"] == cancel["session"][1], (
        "the cancel put the service into fault handling: the next run was bound to a new epoch "
        f"({cancel['session'][1]} -> {cancel['epoch_after']}; the gateway could not confirm the slot free)"
    )
    assert cancel["chat_active_after"] == 0, "the held request is still open at the engine"
    assert victim["service"]["service_id"] == other["service"]["service_id"] == cancel["session"][0]
    assert other["task"] == "create-file" and other["usage"]["evidence_complete"] is True
    if certify_env.engine == "fake":  # scripted to solve the task
        assert cancel["fake_state"]["num_running_reqs"] == 0 and cancel["fake_state"]["leaked_slots"] == 0
        assert other["status"] == "completed" and other["reward"] == 1.0 and other["error"] is None
        assert other["usage"]["requests"] >= 2
    else:  # the model's own trial: it ends on its own terms, untouched by the cancel beside it
        assert cancel["engine_load_after"] == 0, "a request is still open at the engine"
        assert other["status"] in ("completed", "failed") and other["usage"]["requests"] >= 1, other
        assert (other.get("error") or {}).get("code") != "run_cancelled", other["error"]
        if other["status"] == "completed":
            assert other["reward"] is not None, "a completed trial has the verifier's reward"


@_scripted_check(
    "agents.harbor.terminus_solves",
    "terminus-2 with the scripted terminus answers solves a local task through the gateway (reward 1.0; needs Docker and Harbor)",
    summary="terminus-2 solved a local Harbor task through the gateway with the scripted answers (reward 1.0)",
)
def test_harbor_terminus_solves_with_scripted_answers(
    certify_env: CertifyEnv, harbor: HarborInstall, cancel: dict[str, Any], certify_record: Any
) -> None:
    with _profiled(certify_env, harbor, TERMINUS, "agents.harbor.terminus_solves"):
        _, solved = _trials(cancel)
        certify_record.metric("harbor_trial_s", (solved.get("timing") or {}).get("total_s"))
        assert cancel["record"]["agent"] == "terminus-2" and cancel["record"]["model_connection"] == "host"
        assert solved["task"] == "create-file" and solved["status"] == "completed" and solved["reward"] == 1.0
        assert solved["usage"]["input_tokens"] > 0 and solved["usage"]["output_tokens"] > 0


@check(
    "agents.harbor.real_model",
    required=REQUIRED,
    engines=("sglang",),
    reason="the fake engine's answers are scripted (agents.harbor.terminus_solves); this one is the model's own",
    description="terminus-2 on two local Harbor tasks at once on the session's real engine: every trial ends "
    "through the gateway and the model's rewards are recorded as earned (needs Docker and Harbor)",
    summary=lambda d: (
        "terminus-2 ran two local Harbor tasks on the real engine through the gateway; rewards earned: "
        + ", ".join(f"{k} {v}" for k, v in d["rewards"].items())
    ),
)
@pytest.mark.exclusive_engine
def test_harbor_real_model_run_completes(certify_env: CertifyEnv, harbor: HarborInstall, certify_record: Any) -> None:
    with _profiled(certify_env, harbor, TERMINUS, "agents.harbor.real_model"):
        _real_model_ran(certify_env, harbor, certify_record)


def _real_model_ran(certify_env: CertifyEnv, harbor: HarborInstall, certify_record: Any) -> None:
    result = _once(certify_env, "real", lambda: _real_model(certify_env, harbor))
    _timings(certify_record, result)
    trials = _trials(result)
    certify_record.detail("rewards", {t["task"]: t["reward"] for t in trials})
    certify_record.detail("agent_timeout_s", REAL_AGENT_TIMEOUT_S)
    assert len(trials) == 2
    for t in trials:
        assert t["status"] in ("completed", "failed") and t["status"] != "cancelled"
        assert t["service"]["service_id"] == result["session"][0], "every trial leased the session's service"
        assert t["usage"]["requests"] >= 1 and t["usage"]["evidence_complete"] is True
        if t["status"] == "completed":
            assert t["reward"] is not None, "a completed trial has the verifier's reward"
    assert len({t["binding_id"] for t in trials}) == 2
