"""A lock's first start re-hashes its model's files; a corrupt object is refused and quarantined (spec §7.2, §12.2).

Real daemon, real gateway, fake engine processes. A model file changed after its import refuses the run that would
start its lock first (``local_model_integrity_failed`` naming the file), before any engine starts, and the object
is unpublished into ``store/quarantine/``; importing the same checkpoint again makes the model usable. A clean
first start records a marker (:mod:`harness.store.start_check`) and later starts of that lock skip the re-hash.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from fixtures.checkpoint import tiny_checkpoint_cached
from harness.app.daemon_client import DaemonClient, start_daemon
from harness.app.requests import FinishRunRequest, RunRequest, parse_request
from harness.errors import HitchError
from harness.runtimes import get_runtime
from harness.service.state_store import ServiceStateStore
from harness.store import import_model, model_files_dir, resolve_model
from harness.store.start_check import verification_marker
from tests.harness.daemon.conftest import FAST, as_json, hitch
from tests.harness.engine.inputs import GENERIC_RUNTIME, ServiceInputs, checkpoint_cache

pytestmark = pytest.mark.integration


def _ask(run_id: str) -> RunRequest:
    body: dict[str, Any] = {"run_id": run_id, "harness": "model-call", "model": "local/tiny", "device": "cpu",
                            "runtime": get_runtime(GENERIC_RUNTIME).runtime_id, "engine": "fake"}  # fmt: skip
    return parse_request(RunRequest, body)


def _starts(inputs: ServiceInputs) -> list[str | None]:
    if not inputs.root.services.is_dir():
        return []
    return [
        e.run_id
        for d in sorted(inputs.root.services.iterdir())
        for e in ServiceStateStore(inputs.root, d.name).events()
        if e.event == "inference.starting"
    ]


def _corrupt(inputs: ServiceInputs, model_id: str, rel: str = "config.json") -> None:
    path = model_files_dir(inputs.root, model_id) / rel
    os.chmod(path, 0o644)  # published files are read-only
    with path.open("ab") as f:
        f.write(b" ")


def _stop_all(client: DaemonClient) -> None:
    for service in client.services()["services"]:
        client.stop_service(service["service_id"])


def _refused(client: DaemonClient, run_id: str) -> HitchError:
    with pytest.raises(HitchError) as err:
        client.create_run(_ask(run_id))
    assert err.value.code == "local_model_integrity_failed", err.value
    record = client.request("GET", f"/v1/runs/{run_id}")["record"]
    assert record["status"] == "failed" and record["error"]["code"] == "local_model_integrity_failed"
    return err.value


def _assert_quarantined(inputs: ServiceInputs, model_id: str, error: HitchError) -> None:
    where = Path(error.details["quarantined"])
    assert where.parent == inputs.root.digest_dir(inputs.root.quarantine, model_id)
    assert (where / "manifest.json").is_file() and (where / "files" / "config.json").is_file()
    assert json.loads((where / "reason.json").read_text())["details"]["file"] == "config.json"
    assert not model_files_dir(inputs.root, model_id).exists()
    assert not inputs.root.digest_dir(inputs.root.model_verifications, model_id).exists()
    with pytest.raises(HitchError) as again:  # unusable until imported again, and the error says where it went
        resolve_model(inputs.root, "local/tiny")
    assert again.value.code == "local_model_integrity_failed" and str(where.parent) in again.value.message
    listed = as_json(hitch(inputs.root, "models", "list", "--json"))
    assert listed["models"] == [] and listed["quarantined"] == [{"model_id": model_id, "aliases": ["tiny"], "path": str(where)}]


def test_a_first_start_refuses_a_model_corrupted_after_import_quarantines_it_and_a_reimport_recovers(
    inputs: ServiceInputs, tmp_path_factory: pytest.TempPathFactory
) -> None:
    model_id = inputs.lock.model_id
    _corrupt(inputs, model_id)
    start_daemon(inputs.root, FAST)
    client = DaemonClient(inputs.root)
    error = _refused(client, "corrupt")
    assert error.details["file"] == "config.json"
    assert _starts(inputs) == [] and client.services()["services"] == []  # no engine started, not even a probe
    _assert_quarantined(inputs, model_id, error)

    again = import_model(inputs.root, tiny_checkpoint_cached(checkpoint_cache(tmp_path_factory.getbasetemp())), "tiny")
    assert again.model_id == model_id and not again.already_present
    assert as_json(hitch(inputs.root, "models", "list", "--json"))["quarantined"] == []
    run = client.create_run(_ask("recovered"))
    client.finish_run("recovered", FinishRunRequest(status="completed"))
    assert verification_marker(inputs.root, model_id, run["inference_id"]).is_file()


def test_a_sealed_locks_first_start_rehashes_once_and_a_corrupt_file_is_caught_there(inputs: ServiceInputs) -> None:
    start_daemon(inputs.root, FAST)
    client = DaemonClient(inputs.root)
    first = client.create_run(_ask("first"))  # prepares the lock: its first start re-hashed the files
    client.finish_run("first", FinishRunRequest(status="completed"))
    model_id, inference_id = inputs.lock.model_id, first["inference_id"]
    marker = verification_marker(inputs.root, model_id, inference_id)
    assert json.loads(marker.read_text())["inference_id"] == inference_id

    # a lock sealed where no marker was kept (another root's copy, an older root) is re-hashed at its next start
    marker.unlink()
    _stop_all(client)
    client.create_run(_ask("second"))
    client.finish_run("second", FinishRunRequest(status="completed"))
    recorded = marker.read_text()
    _stop_all(client)
    client.create_run(_ask("third"))  # a later start: the marker stands, no re-hash rewrote it
    client.finish_run("third", FinishRunRequest(status="completed"))
    assert marker.read_text() == recorded
    assert _starts(inputs).count("third") == 1  # it was a start, not a reuse

    marker.unlink()
    _stop_all(client)
    _corrupt(inputs, model_id)
    before = _starts(inputs)
    error = _refused(client, "corrupt")
    assert _starts(inputs) == before  # refused before any start
    assert all(not s["leases"] for s in client.services()["services"])
    _assert_quarantined(inputs, model_id, error)
