"""protocol: usage and budgets. Usage present and consistent (total = input + output, reasoning and cached
tokens are subsets, the gateway's evidence row says what the client saw); the output budget honoured exactly
(``max_output_tokens`` / ``max_tokens``: never more, ``incomplete`` / ``length`` when it is hit), a budget
above the lock's refused with ``inference_parameter_conflict`` before the engine; the gateway's context
count equal to real SGLang's prompt tokens for agent-shaped requests.
"""

from __future__ import annotations

import secrets
from typing import Any

from certify.kit import answers
from certify.kit.answers import PROMPT, SMALL
from certify.kit.prompt_cases import CASES, prompt_counts
from certify.kit.requests import evidence_row, gw_post, gw_stream
from certify.registry import check
from certify.session import CertifyEnv
from gateway.sse import parse_events
from harness.app.inventory import model_files
from harness.app.locks import sealed_lock

# -- usage and budgets ---------------------------------------------------------------------------------------


@check(
    "protocol.usage.evidence",
    description="the gateway's evidence row records the usage the client saw, reasoning not added",
    summary="the gateway's evidence rows record the usage the client saw on both APIs (reasoning tokens a subset)",
)
def test_usage_matches_evidence(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    seen: dict[str, Any] = {}
    r = gw_post(run, "/responses", {"model": run.wire_model, "input": PROMPT, "max_output_tokens": SMALL})
    resp = answers.ok_body(r)
    row = evidence_row(certify_env, run, r.headers["x-hitch-request-id"])
    assert row is not None, "no evidence row for the Responses request"
    usage = resp["usage"]
    assert (row["input_tokens"], row["output_tokens"]) == (usage["input_tokens"], usage["output_tokens"]), (row, usage)
    reasoning = (usage.get("output_tokens_details") or {}).get("reasoning_tokens")
    assert row["reasoning_tokens"] in (None, reasoning), (row["reasoning_tokens"], reasoning)
    assert row["max_output_tokens"] == SMALL and row["status"] in ("completed", "incomplete"), row
    seen["responses"] = {"row": {k: row[k] for k in ("input_tokens", "output_tokens", "reasoning_tokens")}, "usage": usage}
    body = {"model": run.wire_model, "messages": [{"role": "user", "content": PROMPT}]}
    r = gw_post(run, "/chat/completions", {**body, "max_tokens": SMALL})
    chat = answers.ok_body(r)
    row = evidence_row(certify_env, run, r.headers["x-hitch-request-id"])
    assert row is not None, "no evidence row for the chat request"
    cu = chat["usage"]
    assert (row["input_tokens"], row["output_tokens"]) == (cu["prompt_tokens"], cu["completion_tokens"]), (row, cu)
    seen["chat"] = {"row": {k: row[k] for k in ("input_tokens", "output_tokens", "reasoning_tokens")}, "usage": cu}
    certify_record.detail("compared", seen)


@check(
    "protocol.budget.responses",
    description="max_output_tokens is honoured exactly; hitting it is status incomplete",
    summary=lambda d: (
        f"max_output_tokens honoured exactly in {len(next(iter(d.values())))} cases; hitting it is status incomplete"
    ),
)
def test_budget_responses(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    got: dict[str, Any] = {}
    for budget in (1, 3, SMALL):
        resp = answers.ok_body(
            gw_post(run, "/responses", {"model": run.wire_model, "input": PROMPT, "max_output_tokens": budget})
        )
        answers.check_response(resp, budget)
        got[str(budget)] = [resp["status"], resp["usage"]["output_tokens"], resp.get("max_output_tokens")]
        if certify_env.engine == "fake":  # the fake never stops early: the budget is hit exactly
            assert resp["status"] == "incomplete" and resp["usage"]["output_tokens"] == budget, resp["usage"]
    r, raw = gw_stream(run, "/responses", {"model": run.wire_model, "input": PROMPT, "max_output_tokens": 3, "stream": True})
    assert r.status_code == 200
    events = parse_events(raw)
    final = answers.check_responses_stream(events, 3)
    got["stream-3"] = [events[-1].event, final["usage"]["output_tokens"]]
    if certify_env.engine == "fake":
        assert events[-1].event == "response.incomplete"
    certify_record.detail("budget -> [status, output_tokens, echoed max_output_tokens]", got)


@check(
    "protocol.budget.chat",
    description="max_tokens / max_completion_tokens honoured exactly; hitting it is finish length",
    summary=lambda d: (
        f"max_tokens / max_completion_tokens honoured exactly in {len(next(iter(d.values())))} cases; hitting it is finish length"
    ),
)
def test_budget_chat(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    base = {"model": run.wire_model, "messages": [{"role": "user", "content": PROMPT}]}
    got: dict[str, Any] = {}
    for field_name, budget in (("max_tokens", 1), ("max_tokens", 3), ("max_completion_tokens", SMALL)):
        resp = answers.ok_body(gw_post(run, "/chat/completions", {**base, field_name: budget}))
        choice = answers.check_chat(resp, budget)
        got[f"{field_name}={budget}"] = [choice["finish_reason"], resp["usage"]["completion_tokens"]]
        if certify_env.engine == "fake":
            assert choice["finish_reason"] == "length" and resp["usage"]["completion_tokens"] == budget
    body = {**base, "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}
    r, raw = gw_stream(run, "/chat/completions", body)
    assert r.status_code == 200
    _, finish, usage = answers.check_chat_stream(raw, 3)
    got["stream max_tokens=3"] = [finish, usage["completion_tokens"]]
    certify_record.detail("budget -> [finish_reason, completion_tokens]", got)


@check(
    "protocol.budget.above_lock",
    description="a budget above the lock's is 400 inference_parameter_conflict, never forwarded",
    summary=lambda d: (
        f"{len(d['refused'])} requests over the lock's {d['lock_max_output_tokens']}-token budget were "
        "refused 400 inference_parameter_conflict, never forwarded"
    ),
)
def test_budget_above_lock(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    cap = answers.lock_output_cap(certify_env)
    # our own User-Agent marks these requests in the fake's log (clearing the shared log would race with the
    # checks other xdist workers run on the same engine)
    marker = {"User-Agent": "certify-budget-" + secrets.token_hex(8)}
    bodies = [
        ("/responses", {"model": run.wire_model, "input": PROMPT, "max_output_tokens": cap + 1}),
        ("/responses", {"model": run.wire_model, "input": PROMPT, "max_output_tokens": cap + 1, "stream": True}),
        (
            "/chat/completions",
            {"model": run.wire_model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": cap + 1},
        ),
        (
            "/chat/completions",
            {"model": run.wire_model, "messages": [{"role": "user", "content": PROMPT}], "max_completion_tokens": cap + 1},
        ),
    ]
    rows: list[dict[str, Any]] = []
    for path, body in bodies:
        r = gw_post(run, path, body, extra=marker)
        assert r.status_code == 400, f"{path}: {r.status_code} {r.text[:300]}"
        err = r.json()["error"]
        assert err["code"] == "inference_parameter_conflict", err
        row = evidence_row(certify_env, run, r.headers["x-hitch-request-id"])
        assert row is not None, "no evidence row for a refused request"
        assert row["status"] == "rejected" and row["engine_rid"] is None, row  # refused before the engine
        rows.append({k: row[k] for k in ("status", "error_code", "http_status")})
    if certify_env.fake is not None:
        ua = marker["User-Agent"]
        reached = [q["path"] for q in certify_env.fake.received() if any(v == ua for _, v in q["headers"])]
        assert not reached, f"refused requests reached the engine: {reached}"
    if certify_env.fake is not None:  # the default budget is the lock's (the fake never stops early)
        resp = answers.ok_body(
            gw_post(run, "/chat/completions", {"model": run.wire_model, "messages": [{"role": "user", "content": PROMPT}]})
        )
        assert resp["usage"]["completion_tokens"] == cap, resp["usage"]
    certify_record.detail("lock_max_output_tokens", cap)
    certify_record.detail("refused", rows)


@check(
    "protocol.context.exact",
    engines=("sglang",),
    description="the gateway's context count equals the engine's prompt tokens for agent-shaped requests",
    summary="a prompt of exactly the context fits and one token more is refused (prompt {prompt_tokens} tokens)",
)
def test_context_count_is_the_engines(certify_env: CertifyEnv, certify_record: Any) -> None:
    """Developer messages, multi-part contents, history tool calls, tool schemas with HTML-special text,
    reasoning items, ``tool_choice: none``: for each, the prompt tokens the gateway counts (and refuses on)
    are the prompt tokens the engine reports for the body the gateway forwards."""
    env = certify_env
    lock = sealed_lock(env.root, env.run.inference_id)
    model_dir = model_files(env.root, lock.model_id)
    counts = {
        case: prompt_counts(env.engine_url, env.engine_headers(), env.run.wire_model, model_dir, lock, case)
        for case in sorted(CASES)
    }
    certify_record.detail("prompt_tokens", {case: {"gateway": ours, "engine": theirs} for case, (ours, theirs) in counts.items()})
    wrong = {case: pair for case, pair in counts.items() if pair[0] != pair[1]}
    assert not wrong, f"(gateway, engine) prompt tokens differ: {wrong}"
