"""Harbor's trials name their evaluation as the cache scope (spec §8.3), driven through the real code that builds a
trial's run (:meth:`HarborEvaluation._create_run`) against a real daemon and the fake engine — no Harbor process and
no container: the root holds a Harbor install's layout only (as ``test_harbor_admission``), and the terminus-2
agent's passing profile for the fake engine.

Under ``--profile throughput`` (the radix cache on) two trials of one evaluation name its id, share one service
(one isolation key, both leases on it, one engine start), and another evaluation's trial gets its own. Under the
default profile (baseline, prefix cache off) the trials name their evaluation all the same, and the scope has no
effect: the service is the lock's one shared service, keyed by :data:`~harness.service.isolation.SHARED_SCOPE`.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.app.daemon_client import DaemonClient
from harness.app.requests import FinishRunRequest, RunRequest, parse_request
from harness.evals.harbor_agents import TERMINUS, record_agent_result
from harness.evals.harbor_install import harbor_install
from harness.evals.harbor_run import EvalOptions, HarborEvaluation
from harness.paths import HitchRoot
from harness.service.isolation import SHARED_SCOPE, isolation_key
from harness.service.state_store import ServiceStateStore
from tests.harness.daemon.conftest import FAST, as_json, hitch
from tests.harness.evals.test_harbor_admission import RUNTIME_ID, TASKS, harbor_agent_key, root

__all__ = ["root"]  # the fixture this module shares with test_harbor_admission

pytestmark = pytest.mark.integration


def _evaluation(root: HitchRoot, evaluation_id: str, profile: str, k: int) -> HarborEvaluation:
    install = harbor_install(root)
    assert install is not None
    body = parse_request(RunRequest, {"model": "local/tiny", "device": "cpu", "profile": profile, "engine": "fake",
                                      "launcher": "process", "runtime": RUNTIME_ID})  # fmt: skip
    options = EvalOptions([TASKS / "create-file"], k=k, n_concurrent=k, evaluation_id=evaluation_id)
    return HarborEvaluation(root, install, DaemonClient(root), body, options)


def _bind_all(evaluation: HarborEvaluation) -> list[dict[str, Any]]:
    """Each trial's run, created as the evaluation creates it; from the first bound trial on, its lock is pinned
    (what ``HarborEvaluation._bound`` records)."""
    runs = []
    for trial in evaluation.trials:
        run = evaluation._create_run(trial)
        evaluation.inference_id = str(run["inference_id"])
        runs.append(run)
    return runs


def _scope_named(client: DaemonClient, run_id: str) -> Any:
    return client.request("GET", f"/v1/runs/{run_id}")["record"]["request"].get("cache_scope_owner")


def _service(client: DaemonClient, service_id: str) -> dict[str, Any]:
    [service] = [s for s in client.services()["services"] if s["service_id"] == service_id]
    return service


def test_throughput_trials_of_one_evaluation_share_its_cache_scope_and_baseline_ones_the_shared_service(
    root: HitchRoot,
) -> None:
    # room for the service and two trials at once on any machine: the trials' turns are not what is tested here
    as_json(hitch(root, "daemon", "start", "--json", *FAST, "--capacity-cpu", "64"))
    record_agent_result(root, TERMINUS, harbor_agent_key(root, TERMINUS), "agents.harbor.terminus_solves", "fake", "cpu", True)
    client = DaemonClient(root)

    first, second = _bind_all(_evaluation(root, "ev-tp-a", "throughput", k=2))
    assert [_scope_named(client, r["run_id"]) for r in (first, second)] == ["ev-tp-a", "ev-tp-a"]
    assert (second["service_id"], second["epoch"]) == (first["service_id"], first["epoch"])
    shared = _service(client, first["service_id"])
    assert shared["isolation_key"] == isolation_key(first["inference_id"], "owner:ev-tp-a")
    assert sorted(lease["owner"] for lease in shared["leases"]) == sorted(r["run_id"] for r in (first, second))
    starts = [e.run_id for e in ServiceStateStore(root, first["service_id"]).events() if e.event == "inference.starting"]
    assert starts == [first["run_id"]]  # one engine start, by the first trial's run (the prepare made for it)

    [other] = _bind_all(_evaluation(root, "ev-tp-b", "throughput", k=1))  # another evaluation: never its service
    assert _scope_named(client, other["run_id"]) == "ev-tp-b"
    assert other["inference_id"] == first["inference_id"] and other["service_id"] != first["service_id"]
    for run in (first, second, other):
        client.finish_run(run["run_id"], FinishRunRequest(status="completed"))

    [plain] = _bind_all(_evaluation(root, "ev-base", "baseline", k=1))
    assert _scope_named(client, plain["run_id"]) == "ev-base"  # named, but the prefix cache is off: no effect
    assert plain["inference_id"] != first["inference_id"]
    assert _service(client, plain["service_id"])["isolation_key"] == isolation_key(plain["inference_id"], SHARED_SCOPE)
    client.finish_run(plain["run_id"], FinishRunRequest(status="completed"))
