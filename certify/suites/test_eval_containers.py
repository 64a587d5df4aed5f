"""Eval containers reach the gateway and nothing else (spec §11.1, §15.3 "Linux Harbor local-docker").

On the session's engine, when a Docker engine is reachable (the checks skip without one, and are not
required: a machine without Docker runs no eval containers): two container-facing runs (``for_containers``)
get URLs on the bridge address of hitch's eval network; a trial container of the eval trial image
(``python -m fixtures.images.trial``) per run talks to the model through its own binding only.

- ``security.eval_network.gateway_only``: an independent probe container on that network reaches hitch's
  gateway (401 ``inference_token_invalid`` for a binding that does not exist) and connects to none of the
  engine's addresses (its own, and its port on the bridge address); the network is internal (no egress).
- ``lifecycle.eval_containers.shared_service``: both runs are bindings of the session's service and epoch
  (no engine started), with their own tokens.
- ``lifecycle.eval_containers.cancel_isolated``: trial B holds its stream open after the first text delta;
  trial A (connected through its binding) is killed and its run cancelled; B then reads the rest of its
  stream intact, and A's binding is refused from then on.

Timing-free: "mid-stream" is the trial's hold state, which the check waits for. Trial containers are removed
here; the eval network is removed by the daemon when it stops.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from certify.kit.white_box import LABEL_ROLE, LABEL_ROOT, EvalNetwork, probe_docker, probe_network, root_label
from certify.registry import check
from certify.session import CertifyEnv, eval_trial_image
from fixtures.eval_trial.driver import release, start_trial, wait_event
from gateway.bindings import run_path_prefix
from harness.app.requests import RunRequest, parse_request
from harness.errors import HitchError

_SHORT = 8


def _create(env: CertifyEnv, image: str, name: str) -> dict[str, Any]:
    body = {**env.body, "run_id": f"certify-eval-{name}-{int(time.time() * 1000) % 10**9}", "for_containers": True}
    return env.daemon.create_run(parse_request(RunRequest, {**body, "eval_image": image}))


@pytest.fixture(scope="module")
def eval_trials(certify_env: CertifyEnv) -> Iterator[dict[str, Any]]:
    env = certify_env
    facts = probe_docker()
    if not facts.reachable:
        pytest.skip(f"needs a reachable Docker engine: {facts.reason}")
    try:
        image = eval_trial_image(env.root.certify)
    except HitchError as exc:
        pytest.skip(exc.message)
    import docker

    client = docker.from_env()
    labels = {LABEL_ROOT: root_label(env.root.path), LABEL_ROLE: "certify-eval-trial"}
    runs: list[dict[str, Any]] = []
    containers: list[Any] = []
    out: dict[str, Any] = {"image": image}
    try:
        t0 = time.perf_counter()
        runs.append(_create(env, image, "b"))
        t1 = time.perf_counter()
        runs.append(_create(env, image, "a"))
        t2 = time.perf_counter()
        run_b, run_a = runs
        out.update(
            run_a=run_a, run_b=run_b, create_first_ms=round((t1 - t0) * 1000, 1), create_second_ms=round((t2 - t1) * 1000, 1)
        )
        attrs = client.api.inspect_network(run_b["eval_network_id"])
        ipv4 = next(c for c in attrs["IPAM"]["Config"] if ":" not in c["Subnet"])
        net = EvalNetwork(attrs["Id"], attrs["Name"], ipv4["Subnet"], ipv4["Gateway"])
        out.update(internal=attrs["Internal"], gateway_ip=net.gateway_ip, network=net.name)
        engine = urlsplit(env.engine_url)
        targets = [f"{net.gateway_ip}:{engine.port}"]
        if engine.hostname not in ("127.0.0.1", "::1", "localhost"):
            targets.insert(0, f"{engine.hostname}:{engine.port}")
        origin = str(run_b["base_url"]).split("/runs/")[0]
        probe = probe_network(env.root.path, net, image, f"{origin}{run_path_prefix('bprobe')}/models", targets, client=client)
        out.update(probe=probe.to_json(), engine_targets=targets)

        b = start_trial(client, image, run_b, max_tokens=_SHORT, name="certify-b", labels=labels)
        containers.append(b)
        wait_event(b, "first_delta")  # B's stream is open, held by its client
        a = start_trial(client, image, run_a, max_tokens=_SHORT, name="certify-a", labels=labels)
        containers.append(a)
        wait_event(a, "models")  # A is served through its own binding while B's stream is open
        token_a = Path(run_a["token_file"]).read_text(encoding="utf-8").strip()  # the cancel removes the file
        t3 = time.perf_counter()
        a.kill()
        cancelled = env.daemon.cancel_run(run_a["run_id"])
        out["cancel_ms"] = round((time.perf_counter() - t3) * 1000, 1)
        out["a_status"] = cancelled["record"]["status"]
        after = httpx.get(f"{run_a['base_url']}/models", headers={"Authorization": f"Bearer {token_a}"}, trust_env=False)
        out["a_after"] = (after.status_code, after.json().get("error", {}).get("code"))
        release(b)
        out["b_done"] = wait_event(b, "done")
        out["b_exit"] = b.wait(timeout=300)["StatusCode"]
        svc = env.service() or {}
        out["service_pid"] = svc.get("pid")
        yield out
    finally:
        for c in containers:
            with contextlib.suppress(Exception):
                c.remove(force=True)
        for run in runs:
            with contextlib.suppress(HitchError):
                env.daemon.delete_run(run["run_id"])
        client.close()


@check(
    "security.eval_network.gateway_only",
    required=False,
    description="a container on hitch's eval network reaches the gateway and none of the engine's addresses (needs Docker)",
    summary=lambda d: (
        f"a container on the internal eval network {d['network']['name']} reached the gateway and none of the "
        f"engine's {len(d['probe']['engine'])} address(es)"
    ),
)
def test_eval_network_gateway_only(eval_trials: dict[str, Any], certify_record: Any) -> None:
    probe = eval_trials["probe"]
    certify_record.detail("probe", probe)
    certify_record.detail("network", {"name": eval_trials["network"], "internal": eval_trials["internal"]})
    assert eval_trials["internal"] is True
    assert probe["gateway_reached"] is True
    assert [row["target"] for row in probe["engine"]] == eval_trials["engine_targets"]
    assert not any(row["connected"] for row in probe["engine"])
    for run in (eval_trials["run_a"], eval_trials["run_b"]):
        assert urlsplit(run["base_url"]).hostname == eval_trials["gateway_ip"]


@check(
    "lifecycle.eval_containers.shared_service",
    required=False,
    description="two eval containers share the session's engine service through their own run bindings (needs Docker)",
    summary=lambda d: f"{len(d['runs'])} eval containers shared one engine service through their own bindings",
)
def test_eval_containers_share_the_service(certify_env: CertifyEnv, eval_trials: dict[str, Any], certify_record: Any) -> None:
    run_a, run_b = eval_trials["run_a"], eval_trials["run_b"]
    certify_record.metric("eval_run_create_ms", eval_trials["create_second_ms"])
    certify_record.detail("runs", [(r["service_id"], r["epoch"], r["binding_id"]) for r in (run_a, run_b)])
    session = certify_env.run
    assert {(r["service_id"], r["epoch"]) for r in (run_a, run_b)} == {(session.service_id, session.epoch)}
    assert run_a["binding_id"] != run_b["binding_id"] and run_a["token_file"] != run_b["token_file"]


@check(
    "lifecycle.eval_containers.cancel_isolated",
    required=False,
    description="killing one eval container and cancelling its run leaves another container's open stream intact (needs Docker)",
    summary=lambda d: (
        f"the cancelled container's binding answered {d['a_after_cancel'][0]} {d['a_after_cancel'][1]}; the "
        f"other finished its stream ({d['b_done']['chunks']} chunks, {d['b_done']['finish_reason']})"
    ),
)
def test_eval_container_cancel_is_isolated(eval_trials: dict[str, Any], certify_record: Any) -> None:
    done = eval_trials["b_done"]
    certify_record.detail("b_done", done)
    certify_record.detail("a_after_cancel", eval_trials["a_after"])
    certify_record.metric("eval_cancel_ms", eval_trials["cancel_ms"])
    assert eval_trials["a_status"] == "cancelled"
    assert eval_trials["a_after"][1] in ("inference_binding_revoked", "inference_token_invalid")
    assert done["status"] == 200 and done["done_marker"] is True and done["finish_reason"] is not None
    assert eval_trials["b_exit"] == 0
