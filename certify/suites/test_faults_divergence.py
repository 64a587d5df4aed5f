"""faults (divergence): an engine that answers otherwise than the one certified, which the evidence must not
absorb and a reproduction must notice.

- ``faults.response_model.identity_kept``: the engine's answers name another model (the fake's
  ``response_model`` fault). ``response.model`` is a wire alias (spec §6.3): the run's execution evidence still
  names the lock's model, resolved by the daemon at readiness; the engine's word reaches the client and nothing
  else.
- ``faults.flip_token.reproduction_differs``: one greedy token of the engine changed (the fake's ``flip_token``
  fault). The comparison ``hitch catalog reproduce`` runs on ``correctness.continuations``
  (:func:`certify.entry_compare.continuation_difference`) finds nothing between two plain answers and names the
  place where the flipped answer departs.

Both run on engines of a private daemon with the fault given at launch (the fake engine only: real SGLang echoes
the request's model and decodes greedily; it cannot be made to do either).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from certify.entry_compare import continuation_difference
from certify.kit.correctness import continuation
from certify.kit.daemon import PrivateDaemon
from certify.kit.faults import FAKE, MODE_CHECKS, fault_kind, sealed_inference_id
from certify.kit.requests import chat_body
from certify.reference_set import PARITY_PROMPTS, PARITY_TOKENS
from certify.registry import check
from certify.session import RunHandle
from harness.contracts.evidence import InferenceExecutionEvidenceV1

_fault_kind = fault_kind("divergence")

IMPOSTOR = "impostor-model"
FLIP_AT = 3
_FAKE_ONLY = "real SGLang echoes the request's model and decodes greedily: it cannot be made to do otherwise"


def _chat(run: RunHandle, content: str, max_tokens: int) -> dict[str, Any]:
    r = httpx.post(
        run.base_url + "/chat/completions",
        json=chat_body(run.wire_model, stream=False, max_tokens=max_tokens, content=content),  # the lock's sampling
        headers=run.headers(),
        timeout=120,
    )
    assert r.status_code == 200, r.text[:300]
    answer: dict[str, Any] = r.json()
    return answer


@check(
    MODE_CHECKS["response_model"],
    engines=FAKE,
    description="an engine whose answers name another model: the run's evidence names the lock's model, the "
    "engine's word reaches only the client",
    reason=_FAKE_ONLY,
    summary=lambda d: (
        f"the engine answered naming {d['engine_said']!r}; the run's evidence names the lock's model "
        f"({d['identity']['effective_id'][:19]}…, wire name {d['identity']['wire_model']!r}, resolved at readiness)"
    ),
)
def test_response_model(private_daemon: PrivateDaemon, certify_record: Any) -> None:
    daemon = private_daemon
    lock = daemon.sealed_lock(sealed_inference_id(daemon))
    run = daemon.create_run(inference_id=lock.inference_id, extra_flags=("--fault", f"response_model:name={IMPOSTOR}"))
    try:
        said = _chat(run, "hello", 8).get("model")
        daemon.delete_run(run)  # the run ends: its evidence is written
        execution = InferenceExecutionEvidenceV1.model_validate_json(
            (daemon.root.runs / run.run_id / "inference" / "execution.json").read_bytes()
        )
    finally:
        daemon.stop_service(run.service_id)
    identity = execution.model_identity
    certify_record.detail("engine_said", said)
    certify_record.detail("identity", identity.to_json_dict() if identity is not None else None)
    assert said == IMPOSTOR, f"the fault did not take: the engine said {said!r}"
    assert identity is not None and identity.identity_resolved, identity
    assert identity.effective_id == execution.model_id == lock.model_id
    assert identity.wire_model == execution.binding.wire_model != IMPOSTOR
    assert IMPOSTOR not in json.dumps(identity.to_json_dict()) + json.dumps(execution.binding.to_json_dict())


@check(
    MODE_CHECKS["flip_token"],
    engines=FAKE,
    description="one greedy token changed: the reproduction's comparison of continuations finds nothing between two "
    "plain answers and names where the changed one departs",
    reason=_FAKE_ONLY,
    summary=lambda d: f"two plain answers compared equal; the one with token {d['flip_at']} changed: {d['found']}",
)
def test_flip_token(private_daemon: PrivateDaemon, certify_record: Any) -> None:
    daemon = private_daemon
    inference_id = sealed_inference_id(daemon)
    prompt = PARITY_PROMPTS[0]
    rows: dict[str, dict[str, Any]] = {}
    for name, flags in (("plain", ()), ("again", ()), ("flipped", ("--fault", f"flip_token:at={FLIP_AT}"))):
        run = daemon.create_run(inference_id=inference_id, extra_flags=flags)
        try:
            answer = _chat(run, prompt, PARITY_TOKENS)
        finally:  # each answer from an engine of its own: one inference id runs one engine choice at a time
            daemon.delete_run(run)
            daemon.stop_service(run.service_id)
        rows[name] = {"api": "chat", "prompt": 0, "prompt_text": prompt, **continuation("chat", answer)}
    same = continuation_difference(rows["plain"], rows["again"])
    found = continuation_difference(rows["plain"], rows["flipped"])
    certify_record.detail("flip_at", FLIP_AT)
    certify_record.detail("same", same.to_json() if same is not None else None)
    certify_record.detail("found", found.detail if found is not None else None)
    assert same is None, same
    assert found is not None and found.kind == "continuation", "the changed token went unnoticed"
    plain, flipped = rows["plain"]["text"], rows["flipped"]["text"]
    departs = next((i for i, (a, b) in enumerate(zip(plain, flipped, strict=False)) if a != b), min(len(plain), len(flipped)))
    certify_record.detail("departs_at_character", departs)
    assert departs > 0, "the answers differ from their first token: more than the one flipped token changed"
