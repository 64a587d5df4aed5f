"""Run ids are idempotency keys: the same request answers the kept record, another is ``run_conflict``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.app.requests import RunRequest, parse_request
from harness.app.run_identity import require_same_request, run_identity
from harness.app.run_store import RunStore
from harness.errors import ERROR_TABLE, HitchError
from harness.paths import HitchRoot
from harness.store import set_alias

MODEL_A = "local/sha256:" + "a" * 64
MODEL_B = "local/sha256:" + "b" * 64
PROMPT = "the secret plan is 42"


def _ask(**changes: Any) -> RunRequest:
    return parse_request(RunRequest, _body(**changes))


def _body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL_A,
        "device": "cpu",
        "profile": "baseline",
        "runtime": "sha256:" + "c" * 64,
        "engine": "fake",
        "harness": "model-call",
        "capture": "metadata",
        "submission": {"prompt_sha256": "sha256:" + "d" * 64, "max_output_tokens": 8},
    }
    return {**body, **changes}


@pytest.fixture
def root(tmp_path: Path) -> HitchRoot:
    return HitchRoot(tmp_path / "root")


def _kept(root: HitchRoot, body: dict[str, Any]) -> Any:
    store = RunStore(root)
    store.admit(
        "r1", body.get("harness"), {}, body.get("capture", "metadata"), run_identity(root, parse_request(RunRequest, body))
    )
    return store.finish("r1", "completed", None)


def test_the_same_request_is_the_same_identity_whatever_defaults_it_spells_out(root: HitchRoot) -> None:
    explicit = _body(launcher="process", fake_flags=[], for_containers=False, capture_max_bytes=None)
    assert run_identity(root, _ask()) == run_identity(root, parse_request(RunRequest, explicit))
    kept = _kept(root, _body())
    require_same_request("r1", kept, run_identity(root, parse_request(RunRequest, explicit)))  # no error: the kept record answers


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"capture": "full"}, "capture"),
        ({"model": MODEL_B}, "lock"),
        ({"profile": "throughput"}, "lock"),
        ({"inference_id": "sha256:" + "e" * 64}, "lock"),
        ({"harness": "codex"}, "harness"),
        ({"engine": "sglang"}, "engine"),
        ({"submission": {"prompt_sha256": "sha256:" + "f" * 64, "max_output_tokens": 8}}, "submission"),
        ({"trial": {"cpus": 1.0, "memory_mb": 2048}}, "trial"),
    ],
)
def test_another_request_under_a_kept_run_id_is_a_conflict_naming_what_differs(
    root: HitchRoot, change: dict[str, Any], field: str
) -> None:
    kept = _kept(root, _body())
    with pytest.raises(HitchError) as info:
        require_same_request("r1", kept, run_identity(root, _ask(**change)))
    err = info.value
    assert err.code == "run_conflict" and err.details["differs"] == [field] and err.details["status"] == "completed"
    spec = ERROR_TABLE["run_conflict"]
    assert (spec.category, spec.exit_code, spec.retryable, spec.http_status) == ("input", 2, False, 409)


def test_a_record_without_a_digest_cannot_be_the_same_request(root: HitchRoot) -> None:
    store = RunStore(root)
    store.admit("old", "model-call", {}, "metadata")
    kept = store.finish("old", "completed", None)
    with pytest.raises(HitchError) as info:
        require_same_request("old", kept, run_identity(root, _ask()))
    assert info.value.code == "run_conflict" and "differs" not in info.value.details


def test_only_hashes_of_the_submission_are_kept(root: HitchRoot) -> None:
    body = _body(submission={"prompt": PROMPT, "agent_args": ["-c", "x=1"]})
    _kept(root, body)
    text = RunStore(root).path("r1").read_text()
    assert PROMPT not in text and "x=1" not in text
    identity = json.loads(text)["identity"]
    assert set(identity["fields"]) >= {"harness", "lock", "capture", "submission", "trial"}
    assert all(v.startswith("sha256:") for v in identity["fields"].values())


def test_an_alias_counts_as_the_model_it_names_when_submitted(root: HitchRoot) -> None:
    set_alias(root, "tiny", MODEL_A.removeprefix("local/"))
    kept = _kept(root, _body(model="local/tiny"))
    require_same_request("r1", kept, run_identity(root, _ask()))  # the model id, not the spelling
    set_alias(root, "tiny", MODEL_B.removeprefix("local/"))  # re-pointed: the same words now ask for another model
    with pytest.raises(HitchError) as info:
        require_same_request("r1", kept, run_identity(root, _ask(model="local/tiny")))
    assert info.value.code == "run_conflict" and info.value.details["differs"] == ["lock"]
