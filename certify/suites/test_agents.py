"""agents: the model-call harness and the pinned Codex CLI drive the local endpoint end to end (spec §10.3, §15.2).

model-call (both engines): one Responses request through the session run's binding with the lock's budget;
tools, images, action items and an over-budget request are refused before anything is sent.

Codex (``harness.agents.codex_install.CODEX_VERSION``): on the session's engine (fake or real SGLang) one
turn completes without a protocol error. On a private scripted fake engine behind a private gateway
(``certify.kit.agents``): a task with two tool round trips (read a file, then change it) leaves the right file
contents, every continuation carries the full history with ``store=false`` and no
``previous_response_id``, and tool-call ids round-trip.

The checks that need no scripted answer run on both engines — on the fake through the private rig, on real
SGLang through a run of the session's own service: a cancel mid-stream ends the run and frees the engine
slot (``agents.codex.cancel``); a context-limit refusal ends the run after exactly one request, before the
engine (``agents.codex.context_limit``: on the real engine a prompt longer than the lock's context, counted
with the model's own tokenizer).

On real SGLang the model's own loop (``agents.codex.real_tool_loop``): Codex asked to read a file and change
it, through the session's endpoint. The check holds the endpoint to its part — every request ends as a
well-formed response, no error other than the model running into its budget — and records what the model
did (tool round trips, whether the file changed); the release gate (:mod:`certify.gate`) needs at least two
round trips and a changed file for ``certified``. A model fixture that cannot drive a tool loop says so
(the model-fixture catalog's ``tool_loop``).

Each Codex check's outcome is recorded in the root's harness compatibility profile (``ProfileStore``).
The Codex checks need the installed binary (``make codex``); they skip without it unless
``HITCH_REQUIRE_CODEX`` is set (then a missing binary fails).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from certify.kit.agents import AgentRig, rig_lock
from certify.kit.codex import call_ids, empty_answer_diagnosis, over_context_prompt
from certify.kit.probes import engine_load, evidence_rows, read_evidence, wait_for
from certify.kit.prompt_cases import RESPONSES, SAMPLING_KEYS, gateway_prompt_ids
from certify.model_facts import not_applicable
from certify.registry import check
from certify.session import CertifyEnv, RunHandle
from gateway.sse import parse_events
from harness.agents.codex_home import CodexBinding
from harness.agents.codex_install import CodexInstall, find_codex
from harness.agents.codex_runner import CodexRun
from harness.agents.model_call import TOKEN_ENV, build_request, call_model
from harness.app.inventory import model_files, model_manifest
from harness.app.locks import sealed_lock
from harness.app.profiles import CODEX_FIELDS, ProfileStore, codex_key, result
from harness.contracts.lock import InferenceLockV1
from harness.errors import HitchError
from harness.settings import settings

_INCOMPLETE = "Incomplete response returned, reason: max_output_tokens"
LOOP_PROMPT = (
    "notes.txt holds a counter. First print notes.txt with a shell command. Then change count=1 to count=2 in "
    "notes.txt with a second shell command."
)
READ_THEN_CHANGE = [
    {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "cat notes.txt"}}]},
    {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "sed -i s/count=1/count=2/ notes.txt"}}]},
    {"text": "count is now 2"},
]


@pytest.fixture(scope="module")
def codex() -> CodexInstall:
    try:
        return find_codex()
    except HitchError as exc:
        if settings().requires("codex"):
            raise
        pytest.skip(f"Codex not installed: {exc.message}")


def _lock(env: CertifyEnv) -> InferenceLockV1:
    return sealed_lock(env.root, env.run.inference_id)


@contextlib.contextmanager
def _profiled(
    env: CertifyEnv,
    codex: CodexInstall,
    lock: InferenceLockV1,
    check_id: str,
    *,
    details: Callable[[], dict[str, str | None]] | None = None,
    ended: RunHandle | None = None,
) -> Iterator[None]:
    """Record the check's outcome in Codex's compatibility profile: passed when the block ends without an error
    (``details``: what the block found, read at its end); ``ended``: a run of the session deleted afterwards."""
    passed = False
    try:
        yield
        passed = True
    finally:
        key = codex_key(lock, codex.artifact, codex.version)
        found = details() if details is not None else {}
        ProfileStore(env.root).record(key, CODEX_FIELDS, result(check_id, env.engine, env.device, passed, **found))
        if ended is not None:
            env.delete_run(ended)


@pytest.fixture
def rig_factory(certify_env: CertifyEnv, tmp_path: Path) -> Iterator[Any]:
    model = model_manifest(certify_env.root, certify_env.model_id)
    model_dir = model_files(certify_env.root, certify_env.model_id)
    numbers = itertools.count()

    with contextlib.ExitStack() as rigs:

        def make(script: list[dict[str, Any]], *extra: str, context: int = 8192) -> AgentRig:
            workdir = tmp_path / f"rig{next(numbers)}"
            return rigs.enter_context(AgentRig(workdir, model_dir, rig_lock(model, context), script, *extra))

        yield make


def _codex_run(
    codex: CodexInstall, base_url: str, wire: str, token: str, lock: InferenceLockV1, where: Path, prompt: str
) -> CodexRun:
    work = where / "work"
    work.mkdir(parents=True, exist_ok=True)
    (work / "notes.txt").write_text("count=1\n", encoding="utf-8")
    # SGLang 0.5.23 holds back a message's events while tools are declared (it learns the item's phase
    # at the end), so the stream is silent for the whole generation: the idle timeout is the request's.
    timeout_ms = lock.execution.request_timeout_ms
    binding = CodexBinding(base_url, wire, lock.execution.context_tokens_per_request, stream_idle_timeout_ms=timeout_ms)
    return CodexRun(codex, binding, token, home=where / "home", workdir=work, prompt=prompt, events_path=where / "events.jsonl")


@dataclass(frozen=True)
class _Target:
    """Where a Codex run points: the fake's private rig, or (real SGLang) a new run of the session's service, which
    the check deletes when it ends (:func:`_profiled`'s ``ended``); ``rows`` reads the target's evidence rows."""

    base_url: str
    wire: str
    token: str
    lock: InferenceLockV1
    rows: Callable[[], list[dict[str, Any]]]
    run: RunHandle | None = None

    @classmethod
    def of_rig(cls, rig: AgentRig) -> _Target:
        return cls(rig.base_url, rig.served, rig.token, rig.lock, rig.evidence_rows)

    @classmethod
    def of_new_run(cls, env: CertifyEnv, lock: InferenceLockV1) -> _Target:
        run = env.new_run()
        return cls(
            run.base_url, run.wire_model, run.token, lock, lambda: evidence_rows(env.root.gateway_dir, run.binding_id), run
        )

    def codex_run(self, codex: CodexInstall, tmp_path: Path, prompt: str) -> CodexRun:
        return _codex_run(codex, self.base_url, self.wire, self.token, self.lock, tmp_path, prompt)


# -- model-call ---------------------------------------------------------------------------------------


@check(
    "agents.model_call.text",
    description="one Responses request through the binding: text, status, usage",
    summary=(
        "one Responses request through the binding answered {status}, with usage, as exactly {physical_requests} physical request"
    ),
)
def test_model_call_text(certify_env: CertifyEnv, certify_record: Any) -> None:
    # a run of its own: its evidence file counts the physical requests (the engine is shared under xdist)
    run, lock = certify_env.new_run(), _lock(certify_env)
    body = build_request(run.wire_model, "Say hello.", lock.generation.max_output_tokens, 16)
    assert run.binding is not None
    res = call_model(run.base_url, body, binding=run.binding, env={TOKEN_ENV: run.token})
    certify_record.detail("status", res.status)
    certify_record.metric("output_tokens", res.usage.get("output_tokens"))
    assert res.status in ("completed", "incomplete")
    assert res.usage.get("input_tokens", 0) > 0 and 0 < res.usage.get("output_tokens", 0) <= 16
    rows = evidence_rows(certify_env.root.gateway_dir, run.binding_id)
    certify_record.detail("physical_requests", len(rows))
    assert len(rows) == 1, rows  # exactly one request, no retry
    certify_env.delete_run(run)


@check(
    "agents.model_call.refusals",
    description="tools, images, action items and an over-budget request are refused",
    summary=(
        "{refused} requests the harness must not send (tools, images, action items, an over-budget one) were "
        "refused before sending"
    ),
)
def test_model_call_refusals(certify_env: CertifyEnv, certify_record: Any) -> None:
    run, lock = certify_env.new_run(), _lock(certify_env)
    cap = lock.generation.max_output_tokens
    cases: list[tuple[Any, int | None, str]] = [
        ([{"type": "function_call", "call_id": "c", "name": "x", "arguments": "{}"}], None, "inference_protocol_unsupported"),
        ([{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}], None, "inference_modality_unsupported"),
        ([{"type": "computer_call", "action": {}}], None, "inference_protocol_unsupported"),
        ("hi", cap + 1, "inference_parameter_conflict"),
    ]
    for prompt, budget, code in cases:
        with pytest.raises(HitchError) as err:
            build_request(run.wire_model, prompt, cap, budget)
        assert err.value.code == code
    certify_record.detail("refused", len(cases))
    assert read_evidence(certify_env.root.gateway_dir, run.binding_id) == []  # nothing was sent
    certify_env.delete_run(run)


# -- Codex --------------------------------------------------------------------------------------------


@check(
    "agents.codex.turn",
    description="the pinned Codex completes one turn through the gateway with a non-empty answer",
    summary=lambda d: (
        f"Codex completed a turn through the gateway and answered {str(d['final_message'])[:60]!r}"
        if not d.get("turn_problem")
        else f"Codex's turn ended at the budget: {d['turn_problem'][:80]}"
    ),
)
def test_codex_turn(certify_env: CertifyEnv, certify_record: Any, codex: CodexInstall, rig_factory: Any, tmp_path: Path) -> None:
    """On real SGLang the session's endpoint answers; the fake's generated text never ends a turn, so on the
    fake a private scripted fake answers (``certify.kit.agents``). A failed turn (Codex's ``turn.failed`` / ``error``:
    a ``response.incomplete`` or ``response.failed``, a protocol error) or an empty answer fails the check.
    A model that cannot end a turn (the model-fixture catalog's ``natural_stop`` is not applicable: a random
    checkpoint) is shown as such: the turn must then end at the lock's budget without a protocol error."""
    lock = _lock(certify_env)
    with _profiled(certify_env, codex, lock, "agents.codex.turn"):
        if certify_env.engine == "fake":
            rig: AgentRig = rig_factory([{"text": "Hello."}])
            base_url, wire, token, turn_lock = rig.base_url, rig.served, rig.token, rig.lock
        else:
            run = certify_env.run
            base_url, wire, token, turn_lock = run.base_url, run.wire_model, run.token, lock
        cx = _codex_run(codex, base_url, wire, token, turn_lock, tmp_path, "Say hello in one word.")
        out = cx.run(timeout_s=600)
        certify_record.evidence("codex-events.jsonl", (tmp_path / "events.jsonl").read_bytes())
        certify_record.detail("errors", out.errors)
        certify_record.detail("final_message", out.final_message)
        problem = out.turn_problem()
        certify_record.detail("turn_problem", problem)
        reason = not_applicable(certify_env.model_id, "natural_stop") if certify_env.engine == "sglang" else None
        if reason is not None and problem is not None:
            # SGLang ends the budget-cut turn with a well-formed response.incomplete, which Codex reports as a
            # failed turn: that much is the protocol working; a cut stream or an HTTP refusal is not.
            certify_record.detail("not_applicable", reason)
            assert out.errors and all(e.startswith(_INCOMPLETE) for e in out.errors), problem
        else:
            assert problem is None, f"{problem}; stderr: {out.stderr_tail[-1500:]}"


@check(
    "agents.codex.tool_loop",
    engines=("fake",),
    description="two tool round trips change a file; full history",
    summary="against scripted answers Codex made two tool round trips, changed the file, and sent the full history each time",
)
def test_codex_tool_loop(
    certify_env: CertifyEnv, certify_record: Any, codex: CodexInstall, rig_factory: Any, tmp_path: Path
) -> None:
    rig: AgentRig = rig_factory(READ_THEN_CHANGE)
    with _profiled(certify_env, codex, rig.lock, "agents.codex.tool_loop"):
        cx = _codex_run(codex, rig.base_url, rig.served, rig.token, rig.lock, tmp_path, "Set count to 2 in notes.txt.")
        out = cx.run(timeout_s=600)
        assert out.completed, out.errors or out.stderr_tail[-1500:]
        assert (tmp_path / "work" / "notes.txt").read_text(encoding="utf-8") == "count=2\n"
        assert [c["aggregated_output"] for c in out.commands()][:1] == ["count=1\n"]
        turns = rig.captures()
        certify_record.metric("requests", len(turns))
        certify_record.metric("first_request_bytes", len(json.dumps(turns[0][0])))
        assert len(turns) == 3
        emitted: list[str] = []
        for i, (body, sse) in enumerate(turns):
            assert body.get("store") is False and "previous_response_id" not in body
            if i:
                prev = turns[i - 1][0]["input"]
                assert body["input"][: len(prev)] == prev  # the whole history again
                new = body["input"][len(prev) :]
                calls = [it["call_id"] for it in new if it.get("type") == "function_call"]
                outs = [it["call_id"] for it in new if it.get("type") == "function_call_output"]
                assert calls == emitted and outs == emitted  # ids round-trip
            emitted = call_ids(sse)


def _loop_summary(d: Any) -> str:
    change = "changed the file" if d["file_changed"] else "left the file unchanged"
    return (
        f"on the real engine the model made {d['tool_round_trips']} tool round trip(s) in {d['requests']} request(s) and {change}"
    )


@check(
    "agents.codex.real_tool_loop",
    required=False,
    engines=("sglang",),
    reason="the fake's answers are scripted (agents.codex.tool_loop); this loop is the model's own",
    description="the pinned Codex on the real engine, asked to read a file and change it: every request ends "
    "well-formed, and the tool round trips the model made and whether the file changed are recorded; a model that "
    "makes no tool round trip is recorded not_applicable, with that measured reason",
    summary=_loop_summary,
)
def test_codex_real_tool_loop(certify_env: CertifyEnv, certify_record: Any, codex: CodexInstall, tmp_path: Path) -> None:
    lock = _lock(certify_env)
    run = certify_env.new_run()  # its own binding: its evidence counts this loop's requests only
    with _profiled(certify_env, codex, lock, "agents.codex.real_tool_loop", ended=run):
        cx = _codex_run(codex, run.base_url, run.wire_model, run.token, lock, tmp_path, LOOP_PROMPT)
        out = cx.run(timeout_s=900)
        certify_record.evidence("codex-events.jsonl", (tmp_path / "events.jsonl").read_bytes())
        after = (tmp_path / "work" / "notes.txt").read_text(encoding="utf-8")
        rows = evidence_rows(certify_env.root.gateway_dir, run.binding_id)
        trips = len(out.commands())  # each a function call the model made, answered with its output
        certify_record.detail("tool_round_trips", trips)
        certify_record.detail("file_changed", after != "count=1\n")
        certify_record.detail("file_after", after[:200])
        certify_record.detail("requests", len(rows))
        certify_record.detail("completed", out.completed)
        certify_record.detail("errors", out.errors)
        # the endpoint's part: each request answered well-formed; the model running into its budget is its own
        assert all(e.startswith(_INCOMPLETE) for e in out.errors), f"{out.errors}; stderr: {out.stderr_tail[-1500:]}"
        assert rows and all(r.get("status") in ("completed", "incomplete") for r in rows), [r.get("status") for r in rows]
        if trips == 0:  # no tool loop to record: the check measured nothing (never a pass on nothing)
            declared = not_applicable(certify_env.model_id, "tool_loop")
            change = "left the file unchanged" if after == "count=1\n" else "the file changed without a tool call"
            measured = f"the model made 0 tool round trips in {len(rows)} request(s) and {change}"
            certify_record.not_applicable(f"{measured} ({declared})" if declared else measured)


@pytest.mark.exclusive_engine  # on the real engine: its load is this check's alone
@pytest.mark.quiet
@check(
    "agents.codex.cancel",
    description="cancel mid-stream ends the run and frees the slot",
    summary="a Codex run cancelled mid-turn ended ({cancel_to_free_s} s from the cancel until the engine slot "
    "was free); its one request is recorded cancelled",
)
def test_codex_cancel(
    certify_env: CertifyEnv, certify_record: Any, codex: CodexInstall, rig_factory: Any, tmp_path: Path
) -> None:
    """Fake: the private rig streams a long scripted answer slowly. Real SGLang: a run of the session's service,
    asked for a long story; the cancel comes once the engine holds the request (its load is 1)."""
    env = certify_env
    if env.engine == "fake":
        rig: AgentRig = rig_factory([{"text": "word " * 400}], "--fake-itl-ms", "100")
        target = _Target.of_rig(rig)

        def load() -> int:
            return int(rig.ctl("GET", "/state")["num_running_reqs"])
    else:
        target = _Target.of_new_run(env, _lock(env))

        def load() -> int:
            return engine_load(env.engine_url, env.engine_headers())

    with _profiled(env, codex, target.lock, "agents.codex.cancel", ended=target.run):
        cx = target.codex_run(codex, tmp_path, "Write a long story about the sea.")
        cx.start()
        try:
            assert wait_for(lambda: load() == 1, 300), "the request never reached the engine"
        finally:
            t0 = time.monotonic()
            cx.cancel()
        out = cx.wait(30)
        assert out.cancelled and out.returncode != 0
        assert wait_for(lambda: load() == 0, 60), "the engine slot was not freed"
        certify_record.metric("cancel_to_free_s", round(time.monotonic() - t0, 3))
        certify_record.detail("cancel_to_free_s", round(time.monotonic() - t0, 3))
        assert [r["status"] for r in target.rows()] == ["cancelled"]


@check(
    "agents.codex.context_limit",
    description="a context refusal ends the run; one request",
    summary="a Codex request over the context was refused with inference_context_exceeded before the engine; "
    "the run ended after {requests} request (no retry)",
)
def test_codex_context_limit(
    certify_env: CertifyEnv, certify_record: Any, codex: CodexInstall, rig_factory: Any, tmp_path: Path
) -> None:
    """Fake: the private rig's lock has a 2,048-token context, which Codex's own instructions exceed. Real SGLang:
    a run of the session's service and a prompt longer than the lock's context."""
    env = certify_env
    if env.engine == "fake":
        rig: AgentRig = rig_factory([{"text": "never"}], context=2048)
        target, prompt = _Target.of_rig(rig), "Say hello."
    else:
        target = _Target.of_new_run(env, _lock(env))
        prompt, tokens = over_context_prompt(env, target.lock)
        certify_record.detail("prompt_tokens", tokens)

    with _profiled(env, codex, target.lock, "agents.codex.context_limit", ended=target.run):
        cx = target.codex_run(codex, tmp_path, prompt)
        out = cx.run(timeout_s=300)
        assert out.returncode != 0 and not out.completed
        # the gateway answers OpenAI's context_length_exceeded, which Codex recognises as a full context window
        assert any("context window" in e.lower() for e in out.errors), out.errors
        got = target.rows()
        certify_record.metric("requests", len(got))
        certify_record.detail("requests", len(got))
        assert [r.get("error_code") for r in got] == ["inference_context_exceeded"]  # exactly one: no retries
        if env.engine == "fake":
            assert rig.engine_requests() == []  # refused before the engine
        else:
            assert got[0].get("engine_rid") is None, got[0]  # refused before the engine: it never had an engine id


@check(
    "agents.codex.history_replay",
    description="the engine accepts Codex's full-history continuation requests",
    summary=lambda d: (
        f"the engine answered Codex's {len(d['terminal_events'])} full-history requests, each to a terminal "
        f"event ({', '.join(sorted(set(d['terminal_events'])))})"
    ),
)
def test_codex_history_replay(
    certify_env: CertifyEnv, certify_record: Any, codex: CodexInstall, rig_factory: Any, tmp_path: Path
) -> None:
    """Codex's requests of a two-tool-call task (recorded through a private gateway to the scripted fake, as
    the engine receives them: developer messages, item ids, function_call echoes with status,
    function_call_output with ids, include, reasoning, prompt_cache_key) are sent to the session's engine
    directly; each must stream to a terminal event with every output item done. On real SGLang the prompt
    tokens the gateway counts for each request must equal those the engine reports.

    A request answered with no output item at all is the endpoint's defect unless it is the model's own answer:
    re-sent greedy, the engine must again end at once (one output token, no item), and the reference
    (transformers, :func:`certify.reference_set.reference_continuation`) given the same prompt ids must end
    its turn at its first token too; then the finding is recorded (entry and compatibility profile: which of
    Codex's fields, removed, bring an answer back) and the check goes on. Any other outcome fails with the
    cause. The fake has no reference: an empty answer there always fails."""
    rig: AgentRig = rig_factory(READ_THEN_CHANGE)
    diagnosis: dict[str, Any] = {}

    def found() -> dict[str, str | None]:
        return {"empty_answer_fields": diagnosis.get("fields"), "empty_answer_cause": diagnosis.get("cause")}

    with _profiled(certify_env, codex, _lock(certify_env), "agents.codex.history_replay", details=found):
        out = _codex_run(codex, rig.base_url, rig.served, rig.token, rig.lock, tmp_path, "Set count to 2.").run(600)
        # The recording rig's fake renders the session model's chat template as SGLang does (a null content as
        # ""): a template that refuses Codex's history fails the recording here, with SGLang's 400.
        assert out.completed, f"recording Codex's requests failed: {out.errors}; engine: {rig.engine.output()[-600:]}"
        bodies = [body for body, _ in rig.captures()]
        assert len(bodies) == 3
        ends = []
        lock = _lock(certify_env)
        model_dir = model_files(certify_env.root, lock.model_id)
        counted: list[tuple[int, int]] = []  # (gateway, engine) prompt tokens of each Codex request, real SGLang only
        for i, body in enumerate(bodies):
            body = {**body, "model": certify_env.run.wire_model, "max_output_tokens": 18}
            r = httpx.post(certify_env.engine_url + "/v1/responses", json=body, headers=certify_env.engine_headers(), timeout=600)
            certify_record.evidence(f"replay-{i}.request.json", json.dumps(body).encode())
            certify_record.evidence(f"replay-{i}.response.sse", r.content)
            assert r.status_code == 200, r.text[:500]
            events = [e for e in parse_events(r.content) if e.event]  # typed Responses events
            kinds = [e.event for e in events]
            assert kinds and kinds[-1] in ("response.completed", "response.incomplete"), kinds[-3:]
            added = sum(1 for k in kinds if k == "response.output_item.added")
            ends.append(kinds[-1])
            assert kinds.count("response.output_item.done") >= added  # no item left without its done event
            prompt_ids: list[int] = []
            if certify_env.engine == "sglang":  # the fake's prompt is not SGLang's; the count is compared on real SGLang
                unlocked = {k: v for k, v in body.items() if k not in SAMPLING_KEYS}
                _, prompt_ids = gateway_prompt_ids(RESPONSES, unlocked, lock, certify_env.run.wire_model, model_dir)
                counted.append((len(prompt_ids), int(events[-1].json()["response"]["usage"]["input_tokens"])))
            if added == 0:
                # Completed with no output item at all: the model's own answer, or the endpoint's defect?
                diagnosis = {"request": i, **empty_answer_diagnosis(certify_env, body, prompt_ids)}
                certify_record.detail("empty_answer", diagnosis)
                if not diagnosis["model_answer"]:
                    pytest.fail(f"replay {i}: {kinds[-1]} with no output item; {diagnosis['cause']}")
        certify_record.detail("terminal_events", ends)
        if counted:
            certify_record.detail("prompt_tokens_gateway_engine", counted)
            assert all(ours == theirs for ours, theirs in counted), f"(gateway, engine) prompt tokens differ: {counted}"
