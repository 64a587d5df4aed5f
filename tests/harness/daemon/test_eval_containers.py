"""Eval containers reach the gateway and nothing else: a real daemon, the fake engine as a
process, two "trial" containers (``python -m fixtures.images.trial``) on hitch's eval network, each with its
own container-facing run binding of one shared engine service.

Timing-free: a trial holds its stream open after the first text delta until the test creates its hold
file, so "mid-stream" is a state the test waits for, never a race. The baseline profile (no prefix cache) is
what runs share; its one running slot serves B's short answer, then A's long one, which is still streaming
(answer budget x 0.1 s inter-token latency) when A is killed and cancelled. Figures (start, reuse, cancel) are printed.
Every container and network is removed; the daemon removes its eval network when it stops.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx
import pytest

from fixtures.eval_trial.driver import release, start_trial, wait_event
from harness.app.daemon_client import DaemonClient
from harness.errors import HitchError
from harness.launch.eval_network import LABEL_ROLE, eval_network_name
from harness.launch.oci_config import LABEL_ROOT, root_label
from harness.paths import HitchRoot
from tests.harness.daemon.conftest import FAST, HITCH, as_json, hitch
from tests.harness.engine.inputs import GENERIC_RUNTIME, ServiceInputs

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

_WAIT_S = 180.0


@pytest.fixture
def trials(client: docker.DockerClient, inputs: ServiceInputs) -> Iterator[list[Any]]:
    """Trial containers the test starts; removed before the daemon stops (which then removes the network)."""
    started: list[Any] = []
    yield started
    for c in started:
        with contextlib.suppress(docker.errors.NotFound):
            c.remove(force=True)
    with contextlib.suppress(HitchError):
        DaemonClient(inputs.root).shutdown()
    label = f"{LABEL_ROOT}={root_label(inputs.root.path)}"
    deadline = time.monotonic() + 60
    while client.api.networks(filters={"label": label}) and time.monotonic() < deadline:
        time.sleep(0.1)  # the daemon removes its eval network on its way out
    assert client.api.networks(filters={"label": label}) == []
    assert client.api.containers(all=True, filters={"label": label}) == []


def _body(run_id: str, image: str, *flags: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "model": "local/tiny",
        "device": "cpu",
        "profile": "baseline",  # no prefix cache: runs of the lock share one service (throughput is per run)
        "runtime": GENERIC_RUNTIME,
        "engine": "fake",
        "launcher": "process",
        "fake_flags": list(flags),
        "capture": "metadata",
        "for_containers": True,
        "eval_image": image,
    }


def _trial(client: docker.DockerClient, root: HitchRoot, image: str, run: dict[str, Any], max_tokens: int, name: str) -> Any:
    labels = {LABEL_ROOT: root_label(root.path), LABEL_ROLE: "eval-trial-test"}
    return start_trial(client, image, run, max_tokens=max_tokens, name=name, labels=labels)


def _rows(root: HitchRoot, run_id: str) -> list[dict[str, Any]]:
    text = (root.runs / run_id / "inference" / "attempts.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_two_trials_share_one_service_and_a_cancelled_trial_leaves_the_other_alone(
    inputs: ServiceInputs, client: docker.DockerClient, trial_image: str, trials: list[Any]
) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    daemon = DaemonClient(root)
    itl = ("--fake-itl-ms", "100")  # a long answer takes budget x 0.1 s: trial A is still streaming when cancelled
    t0 = time.monotonic()
    run_a = daemon.request("POST", "/v1/runs", _body("trial-a", trial_image, *itl), timeout_s=600)
    t1 = time.monotonic()
    run_b = daemon.request("POST", "/v1/runs", _body("trial-b", trial_image, *itl), timeout_s=600)
    t2 = time.monotonic()
    assert run_a["service_id"] == run_b["service_id"] and run_a["binding_id"] != run_b["binding_id"]
    assert Path(run_a["token_file"]).read_text() != Path(run_b["token_file"]).read_text()
    services = daemon.services()["services"]
    assert len(services) == 1 and len(services[0]["leases"]) == 2  # the service started once, shared
    net = client.api.inspect_network(run_a["eval_network_id"])
    gateway_ip = net["IPAM"]["Config"][0]["Gateway"]
    assert net["Internal"] is True and run_a["eval_network"] == eval_network_name(root.path)
    assert run_a["base_url"].startswith(f"http://{gateway_ip}:") and run_b["base_url"].startswith(f"http://{gateway_ip}:")

    # a container-facing binding is not served on the loopback listener, nor with another run's token
    token_a, token_b = (Path(r["token_file"]).read_text().strip() for r in (run_a, run_b))
    crossed = httpx.get(f"{run_a['base_url']}/models", headers={"Authorization": f"Bearer {token_b}"}, trust_env=False)
    assert crossed.status_code == 401

    budget = json.loads((root.digest_dir(root.sealed_locks, run_a["inference_id"]) / "lock.json").read_text())
    long_answer = int(budget["generation"]["max_output_tokens"])
    # one running slot (baseline): B's short answer is relayed, then A's long one streams; each client holds
    # its stream open after the first text delta
    b = _trial(client, root, trial_image, run_b, 8, "b")
    trials.append(b)
    wait_event(b, "first_delta")
    a = _trial(client, root, trial_image, run_a, long_answer, "a")
    trials.append(a)
    wait_event(a, "first_delta")  # A is mid-stream for long_answer x 0.1 s; B's stream is open, unread

    t3 = time.monotonic()
    a.kill()
    cancelled = daemon.request("POST", "/v1/runs/trial-a/cancel")
    t4 = time.monotonic()
    assert cancelled["record"]["status"] == "cancelled"
    refused = httpx.get(f"{run_a['base_url']}/models", headers={"Authorization": f"Bearer {token_a}"}, trust_env=False)
    assert refused.status_code in (401, 403) and refused.json()["error"]["code"] == "inference_binding_revoked"

    release(b)
    done = wait_event(b, "done")
    assert b.wait(timeout=_WAIT_S)["StatusCode"] == 0
    assert done == {**done, "status": 200, "done_marker": True, "finish_reason": "length"} and done["chars"] > 0
    daemon.request("DELETE", "/v1/runs/trial-b")
    rows_a, rows_b = _rows(root, "trial-a"), _rows(root, "trial-b")
    chats_a = [r for r in rows_a if r["route"] == "/v1/chat/completions"]
    chats_b = [r for r in rows_b if r["route"] == "/v1/chat/completions"]
    assert [r["status"] for r in chats_a] == ["cancelled"], chats_a
    assert [r["status"] for r in chats_b] == ["incomplete"], chats_b  # stopped by its budget (finish "length"), intact
    assert daemon.services()["services"][0]["leases"] == []
    assert daemon.services()["services"][0]["epoch"] == run_a["epoch"]  # never restarted
    print(
        f"\nEVAL-TRIAL FIGURES: first run (service start + probes) {t1 - t0:.2f}s; second run (reuse + probe) "
        f"{t2 - t1:.2f}s; kill A + cancel A's run {t4 - t3:.2f}s; B's stream completed intact"
    )


def test_serve_for_containers_prints_the_container_url(
    inputs: ServiceInputs, client: docker.DockerClient, trial_image: str, trials: list[Any], tmp_path: Path
) -> None:
    import subprocess

    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    refused = hitch(root, "local", "serve", "local/tiny", "--device", "cpu", "--engine", "fake", "--for-containers", "--json")
    assert refused.returncode == 2 and json.loads(refused.stdout)["error"]["code"] == "usage_error"
    out, err = tmp_path / "serve.out", tmp_path / "serve.err"
    argv = [*HITCH, "local", "serve", "local/tiny", "--device", "cpu", "--engine", "fake", "--run-id", "served",
            "--for-containers", "--eval-image", trial_image, "--json", "--root", str(root.path)]  # fmt: skip
    with out.open("w") as fh, err.open("w") as eh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=eh, text=True)
    try:
        deadline = time.monotonic() + _WAIT_S
        while not out.read_text().strip() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out.read_text().strip(), err.read_text()
        run = json.loads(out.read_text().splitlines()[0])
        assert run["for_containers"] is True and run["eval_network"] == eval_network_name(root.path)
        trial = _trial(client, root, trial_image, run, 4, "served")
        trials.append(trial)
        wait_event(trial, "first_delta")
        release(trial)
        assert wait_event(trial, "done")["done_marker"] is True
        # the printed URL is for containers: the host's loopback clients use a loopback run instead
        token = Path(run["token_file"]).read_text().strip()
        loop = daemon_loopback_origin(root)
        wrong = httpx.get(
            f"{loop}/runs/{run['binding_id']}/v1/models", headers={"Authorization": f"Bearer {token}"}, trust_env=False
        )
        assert wrong.status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def daemon_loopback_origin(root: HitchRoot) -> str:
    """The daemon gateway's loopback origin, read from a loopback run's base URL."""
    daemon = DaemonClient(root)
    run = daemon.request("POST", "/v1/runs", {**_body("loop", "x"), "for_containers": False, "profile": "baseline"})
    daemon.request("DELETE", "/v1/runs/loop")
    return str(run["base_url"]).split("/runs/")[0]


def test_a_network_hitch_did_not_make_fails_the_run_before_anything_starts(
    inputs: ServiceInputs, client: docker.DockerClient, trial_image: str, trials: list[Any]
) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    foreign = client.networks.create(eval_network_name(root.path), driver="bridge")
    try:
        with pytest.raises(HitchError) as err:
            DaemonClient(root).request("POST", "/v1/runs", _body("topo", trial_image), timeout_s=600)
    finally:
        foreign.remove()
    assert err.value.code == "local_inference_topology_unsupported"
    assert DaemonClient(root).services()["services"] == []  # nothing was prepared or started
    assert not (root.runs / "topo").exists()
