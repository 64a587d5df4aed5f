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
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from certify.components import missing
from certify.kit.harbor import REAL_AGENT_TIMEOUT_S, cancel_held_real, cancel_mid_request, in_container, once, real_model
from certify.kit.white_box import probe_docker
from certify.registry import Summary, check
from certify.session import CertifyEnv
from certify.turns import engine_turn
from harness.app.locks import sealed_lock
from harness.errors import HitchError
from harness.evals.harbor_agents import SHELL_AGENT, TERMINUS, agent_key, record_agent_result
from harness.evals.harbor_install import HarborInstall, harbor_install
from harness.evals.harbor_run import base_image_id
from harness.paths import HitchRoot
from harness.settings import settings

REPO = Path(__file__).resolve().parents[2]
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


@pytest.fixture(scope="module")
def inside(request: pytest.FixtureRequest, certify_env: CertifyEnv, harbor: HarborInstall) -> dict[str, Any]:
    with engine_turn(request.config, exclusive=True):  # it scripts the shared fake engine
        return once(certify_env, "inside", lambda: in_container(certify_env, harbor))


@pytest.fixture(scope="module")
def cancel(request: pytest.FixtureRequest, certify_env: CertifyEnv, harbor: HarborInstall) -> dict[str, Any]:
    control = certify_env.fake
    with engine_turn(request.config, exclusive=True):  # faults, script and request log of the shared fake
        if control is not None:
            return once(certify_env, "cancel", lambda: cancel_mid_request(certify_env, harbor, control))
        if certify_env.engine == "fake":
            pytest.skip("needs the fake engine's control channel (a process-launched contract session)")
        return once(certify_env, "cancel-real", lambda: cancel_held_real(certify_env, harbor))


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
    result = once(certify_env, "real", lambda: real_model(certify_env, harbor))
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
