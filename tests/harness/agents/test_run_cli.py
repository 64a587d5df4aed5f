"""``hitch run --harness ...`` and ``hitch local serve`` end to end: real daemon, real gateway, fake engine
process — or the fake engine in its container (``--launcher oci --image``: runs carry the pinned image; the
image is built by ``python -m fixtures.images.fake_engine``; skipped without Docker unless ``HITCH_REQUIRE_DOCKER=1``).
The image choices a run is refused for are answered with their codes before any daemon starts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from harness.app.daemon_client import DaemonClient, daemon_running
from harness.contracts.evidence import InferenceExecutionEvidenceV1
from harness.contracts.service import InferenceServiceRecordV1
from harness.devices import run_doctor
from harness.errors import ERROR_TABLE, HitchError
from harness.launch.oci_config import LABEL_ROOT, root_label
from harness.paths import HitchRoot
from tests.components import missing
from tests.harness.daemon.conftest import FAST, HITCH, as_json, hitch, inputs, leak_guard
from tests.harness.docker_support import docker_client_or_skip, fake_image_id
from tests.harness.engine.inputs import ServiceInputs

pytestmark = pytest.mark.integration

__all__ = ["inputs", "leak_guard"]  # the daemon tests' fixtures: a root holding local/tiny, the leak guard


def _leases(root: HitchRoot) -> list[object]:
    return [lease for s in DaemonClient(root).services()["services"] for lease in s["leases"]]


def test_model_call_run_writes_evidence_and_releases(inputs: ServiceInputs) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    out = as_json(
        hitch(
            root,
            "run",
            "--harness",
            "model-call",
            "--model",
            "local/tiny",
            "--device",
            "cpu",
            "--engine",
            "fake",
            "--prompt",
            "hello",
            "--max-output-tokens",
            "8",
            "--run-id",
            "mc-1",
            "--json",
        )
    )
    assert out["status"] in ("completed", "incomplete") and out["max_output_tokens"] == 8
    ev = root.runs / "mc-1" / "inference"
    for name in ("lock.json", "model.json", "runtime.json", "execution.json", "harness.json", "result.json"):
        assert (ev / name).is_file(), name
    execution = InferenceExecutionEvidenceV1.model_validate_json((ev / "execution.json").read_text())
    assert execution.requests == 1 and execution.inference_id == out["inference_id"]
    # the engine ran pinned to cores of one NUMA node; they are in the evidence
    allocation = execution.hardware["allocation"]
    threads = json.loads((ev / "lock.json").read_text())["execution"]["platform"]["cpu_threads"]
    assert allocation["device"] == "cpu" and len(allocation["cpu_cores"]) == threads
    assert set(allocation["cpu_cores"]) <= os.sched_getaffinity(0)
    isolation = execution.hardware["isolation"]  # what the process launcher does not isolate is said, not hidden
    assert isolation["cpu_affinity"] == allocation["cpu_cores"] and isolation["network"] == "host"
    assert isolation["memory_limit_bytes"] is None and isolation["memory_limit_limitation"].startswith("not enforced")
    lock_resources = json.loads((ev / "lock.json").read_text())["resources"]
    assert isolation["memory_limit_stated_bytes"] == lock_resources["memory_bytes"]  # the budget, stated
    assert json.loads((ev / "harness.json").read_text())["key"]["harness"] == "model-call"
    assert _leases(root) == []
    # the same identity again, pinned: --device is refused, the pinned run works
    pinned = hitch(root, "run", "--harness", "model-call", "--inference", out["inference_id"], "--device", "cpu",
                   "--engine", "fake", "--prompt", "x", "--json")  # fmt: skip
    assert pinned.returncode == 2 and json.loads(pinned.stdout)["error"]["code"] == "usage_error"
    again = as_json(hitch(root, "run", "--harness", "model-call", "--inference", out["inference_id"], "--engine", "fake",
                          "--prompt", "x", "--max-output-tokens", "4", "--json"))  # fmt: skip
    assert again["inference_id"] == out["inference_id"]


def test_over_budget_and_uncertified_codex_are_refused_and_release(inputs: ServiceInputs) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    over = hitch(root, "run", "--harness", "model-call", "--model", "local/tiny", "--engine", "fake", "--prompt", "x",
                 "--max-output-tokens", "999999", "--json")  # fmt: skip
    assert json.loads(over.stdout)["error"]["code"] == "inference_parameter_conflict"
    assert _leases(root) == []
    codex = hitch(root, "run", "--harness", "codex", "--model", "local/tiny", "--engine", "fake", "--prompt", "x", "--json")
    code = json.loads(codex.stdout)["error"]["code"]
    assert code in ("inference_harness_unsupported", "harness_unavailable")
    assert _leases(root) == []


def test_offline_without_the_runtime_names_the_prepare_command(inputs: ServiceInputs) -> None:
    proc = hitch(inputs.root, "run", "--harness", "model-call", "--model", "local/tiny", "--allow-uncertified", "--offline",
                 "--prompt", "x", "--json")  # fmt: skip
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == "inference_runtime_unavailable"  # a fresh root has no runtime installed
    assert any(
        cmd.startswith("hitch local prepare local/tiny --device cpu --allow-uncertified") for cmd in err["details"]["run_first"]
    )


def _oci_records(root: HitchRoot) -> list[InferenceServiceRecordV1]:
    records = [InferenceServiceRecordV1.model_validate_json(p.read_text()) for p in root.services.glob("*/state.json")]
    return [r for r in records if r.process is not None and r.process.launcher == "oci"]


def _oci_daemon(inputs: ServiceInputs, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, HitchRoot]:
    docker_client_or_skip().close()
    image = fake_image_id(tmp_path_factory)
    as_json(hitch(inputs.root, "daemon", "start", "--json", *FAST))
    return image, inputs.root


def _no_containers_left(root: HitchRoot) -> None:
    client = docker_client_or_skip()
    try:
        left = client.containers.list(all=True, filters={"label": f"{LABEL_ROOT}={root_label(root.path)}"})
        assert left == [], [c.name for c in left]
    finally:
        client.close()


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        (["--engine", "fake", "--launcher", "oci", "--image", "hitch/fake-sglang:dev"], "inference_runtime_unpinned"),
        (["--engine", "fake", "--launcher", "oci"], "usage_error"),
        (["--engine", "fake", "--image", "sha256:" + "a" * 64], "usage_error"),
        # no image for it: --offline names `hitch runtime pin` and the prepare command instead of pulling
        (["--launcher", "oci", "--offline", "--allow-uncertified"], "inference_runtime_unavailable"),
    ],
)
def test_run_image_choices_are_refused_before_anything_starts(inputs: ServiceInputs, extra: list[str], code: str) -> None:
    out = hitch(inputs.root, "run", "--harness", "model-call", "--model", "local/tiny", "--prompt", "x", "--json", *extra)
    assert out.returncode != 0 and json.loads(out.stdout)["error"]["code"] == code
    assert daemon_running(inputs.root) is None


@pytest.mark.needs_docker
def test_model_call_run_on_an_oci_engine(inputs: ServiceInputs, tmp_path_factory: pytest.TempPathFactory) -> None:
    image, root = _oci_daemon(inputs, tmp_path_factory)
    out = as_json(
        hitch(root, "run", "--harness", "model-call", "--model", "local/tiny", "--engine", "fake", "--launcher", "oci",
              "--image", image, "--prompt", "hello", "--max-output-tokens", "8", "--run-id", "oci-1", "--json")
    )  # fmt: skip
    assert out["status"] in ("completed", "incomplete") and out["max_output_tokens"] == 8
    execution = InferenceExecutionEvidenceV1.model_validate_json(
        (root.runs / "oci-1" / "inference" / "execution.json").read_text()
    )
    assert execution.requests == 1 and execution.inference_id == out["inference_id"]
    # prepare's probe service (the draft lock) ran on the image too, and stopped
    (record,) = [r for r in _oci_records(root) if r.inference_id == out["inference_id"]]
    assert record.process is not None and record.process.image_id == image and record.process.network_subnet
    assert [lease for s in DaemonClient(root).services()["services"] for lease in s["leases"]] == []
    hitch(root, "daemon", "stop", "--json")
    _no_containers_left(root)


@pytest.mark.needs_docker
def test_local_serve_on_an_oci_engine(inputs: ServiceInputs, tmp_path_factory: pytest.TempPathFactory) -> None:
    image, root = _oci_daemon(inputs, tmp_path_factory)
    argv = [*HITCH, "local", "serve", "local/tiny", "--engine", "fake", "--launcher", "oci",
            "--image", image, "--run-id", "serve-oci", "--json", "--root", str(root.path)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        token = Path(first["token_file"]).read_text(encoding="utf-8").strip()
        reply = httpx.post(
            first["base_url"] + "/chat/completions",
            json={"model": first["wire_model"], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
            trust_env=False,
        )
        assert reply.status_code == 200, reply.text
        assert len([r for r in _oci_records(root) if r.state != "stopped"]) == 1  # not prepare's stopped probe
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and json.loads(rest.splitlines()[-1])["signal"] == "SIGTERM"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    hitch(root, "daemon", "stop", "--json")
    _no_containers_left(root)


@pytest.mark.skipif(run_doctor("auto").selected is not None, reason="this machine has a certified backend")
def test_auto_without_a_certified_backend_names_why_and_the_permission(inputs: ServiceInputs) -> None:
    proc = hitch(inputs.root, "run", "--harness", "model-call", "--model", "local/tiny", "--prompt", "x", "--json")
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == "inference_backend_uncertified"
    assert proc.returncode == ERROR_TABLE["inference_backend_uncertified"].exit_code
    assert "--allow-uncertified" in err["message"] and err["details"]["fallback"] == "cpu"
    for argv in (("run", "--harness", "model-call", "--model", "local/tiny", "--device", "cpu", "--prompt", "x"),
                 ("local", "prepare", "local/tiny", "--device", "cpu"), ("local", "serve", "local/tiny")):  # fmt: skip
        refused = hitch(inputs.root, *argv, "--json")
        assert json.loads(refused.stdout)["error"]["code"] == "inference_backend_uncertified", argv
    assert as_json(hitch(inputs.root, "daemon", "status", "--json"))["running"] is False  # refused before any start


def test_the_lock_records_an_uncertified_backend_and_pins_its_model(inputs: ServiceInputs) -> None:
    root = inputs.root
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    prepared = as_json(hitch(root, "local", "prepare", "local/tiny", "--engine", "fake", "--json"))
    assert prepared["device"] == "cpu" and prepared["profile"] == "evaluation-baseline-v1"
    assert prepared["backend_certification"] == "uncertified"  # the generic-CPU runtime
    assert prepared["device_choice"]["requested"] == "auto" and prepared["device_choice"]["reasons"]
    lock = json.loads(Path(prepared["lock_path"]).read_text())
    assert lock["execution"]["backend_certification"] == "uncertified"
    events = [json.loads(line) for path in root.path.rglob("events.jsonl") for line in path.read_text().splitlines()]
    preparing = [e for e in events if e["event"] == "inference.preparing" and e["inference_id"] == prepared["inference_id"]]
    assert preparing and preparing[0]["details"]["device_choice"]["requested"] == "auto"
    variant = root.path.parent / "other-checkpoint"
    shutil.copytree(inputs.model_dir, variant)
    config = json.loads((variant / "config.json").read_text())
    (variant / "config.json").write_text(json.dumps({**config, "hitch_test_variant": 1}))  # another model id
    as_json(hitch(root, "models", "add", str(variant), "--name", "other", "--json"))
    wrong = hitch(root, "run", "--harness", "model-call", "--inference", prepared["inference_id"], "--model",
                  "local/other", "--engine", "fake", "--prompt", "x", "--json")  # fmt: skip
    err = json.loads(wrong.stdout)["error"]
    assert err["code"] == "inference_lock_mismatch" and err["details"]["lock_model_id"] == lock["model_id"]
    ok = as_json(hitch(root, "run", "--harness", "model-call", "--inference", prepared["inference_id"], "--model",
                       "local/tiny", "--engine", "fake", "--prompt", "x", "--max-output-tokens", "4", "--json"))  # fmt: skip
    assert ok["backend_certification"] == "uncertified" and ok["device"] == "cpu"


def _nothing_started(root: HitchRoot) -> None:
    assert not root.runs.exists() or list(root.runs.iterdir()) == []  # no run was even admitted
    assert as_json(hitch(root, "daemon", "status", "--json"))["running"] is False


def test_codex_without_a_certified_profile_is_refused_before_any_service(inputs: ServiceInputs) -> None:
    from harness.agents.codex_install import find_codex

    try:
        find_codex()
    except HitchError as err:
        missing("codex", err.message)
    proc = hitch(inputs.root, "run", "--harness", "codex", "--model", "local/tiny", "--engine", "fake", "--prompt", "x",
                 "--json")  # fmt: skip
    assert json.loads(proc.stdout)["error"]["code"] == "inference_harness_unsupported"
    _nothing_started(inputs.root)


def test_an_unknown_alias_is_refused_first(inputs: ServiceInputs) -> None:
    # even with a device this machine cannot serve: the alias is the first thing a run looks up
    proc = hitch(inputs.root, "run", "--harness", "model-call", "--model", "local/nope", "--device", "cuda",
                 "--prompt", "x", "--json")  # fmt: skip
    assert json.loads(proc.stdout)["error"]["code"] == "local_model_not_found"
    _nothing_started(inputs.root)
    # an option value no command accepts is refused before that, as a usage error
    proc = hitch(inputs.root, "run", "--harness", "model-call", "--model", "local/nope", "--device", "metal",
                 "--prompt", "x", "--json")  # fmt: skip
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"]["code"] == "usage_error"
    _nothing_started(inputs.root)
