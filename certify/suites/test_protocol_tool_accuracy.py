"""protocol: how well a real model's forced tool calls come out through the gateway — a measured figure.

``protocol.tools.schema_accuracy`` sends forced (named ``tool_choice``) Responses requests over three tool
schemas and many prompts, stream and non-stream, and reports the share of answers holding one call of the
forced tool whose arguments parse as JSON and validate against the tool's schema, with its Wilson 95 %
interval (:func:`harness.stats.wilson_interval`). The tools are not ``strict``, as most clients send them:
SGLang 0.5.23 then holds only the call's start to the grammar, and the arguments are the model's own. The
requests go as many at once as the lock lets the engine run (one on today's CPU locks, where 104 SmolLM2
calls take about 6 minutes; a GPU lock's slots batch them). Every answer must conform to the Open Responses
schema and every request must be answered: those fail the check. The share itself is the model's, a figure
in the entry, never a pass/fail: the level does not depend on it (not required). The fake engine answers a
forced call with the smallest valid arguments, so a figure of it would say nothing: real engines only.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jsonschema  # type: ignore[import-untyped,unused-ignore]

from certify.kit.probes import session_lock
from certify.kit.requests import CALL_BUDGET, FORECAST_SCHEMA, gw_post, gw_stream
from certify.open_responses import resource_errors, stream_errors
from certify.registry import check
from certify.session import CertifyEnv, RunHandle
from gateway.sse import parse_events
from harness.stats import wilson_interval

# three schemas of different shapes: enums, a bounded integer beside free text, several bounded integers
TOOLS: dict[str, dict[str, Any]] = {
    "get_forecast": {"description": "Weather forecast for a city", "parameters": FORECAST_SCHEMA},
    "search_files": {
        "description": "Search the project's files",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "max_results": {"type": "integer", "minimum": 1, "maximum": 50}},
            "required": ["query", "max_results"],
            "additionalProperties": False,
        },
    },
    "set_alarm": {
        "description": "Set an alarm",
        "parameters": {
            "type": "object",
            "properties": {
                "hour": {"type": "integer", "minimum": 0, "maximum": 23},
                "minute": {"type": "integer", "minimum": 0, "maximum": 59},
                "label": {"type": "string"},
            },
            "required": ["hour", "minute"],
            "additionalProperties": False,
        },
    },
}
_CITIES = ("Paris", "London", "Tokyo")
PROMPTS: dict[str, list[str]] = {
    "get_forecast": [
        *(f"What is the weather forecast in {c}, in {u}?" for c in _CITIES for u in ("celsius", "fahrenheit")),
        *(f"Will it rain in {c} tomorrow?" for c in _CITIES),
        *(f"I am flying to {c}. Should I pack a coat?" for c in _CITIES),
        *(f"Give me the {c} forecast." for c in _CITIES),
        *(f"How warm will {c} be this weekend?" for c in _CITIES),
    ],
    "search_files": [
        *(f"Find {n} files mentioning {w}." for n, w in (("3", "TODO"), ("5", "main"), ("10", "config"), ("2", "README"))),
        *(f"Show me up to {n} files about {w}." for n, w in (("7", "tests"), ("1", "license"), ("4", "docker"), ("6", "json"))),
        "Search the code for the parser.",
        "Where is the gateway defined?",
        "Look for files about docker.",
        "Which files import json?",
        "List a few files about errors.",
        "Find the setup script.",
        "Search for the word deadline.",
        "Which file holds the error table?",
        "Find where tokens are counted.",
    ],
    "set_alarm": [
        *(f"Wake me up at {t}." for t in ("6:30", "7:00", "5:45", "8:15", "9:00", "6:05")),
        *(f"Set an alarm for {t} called {w}." for t, w in (("7:30", "gym"), ("13:20", "call"), ("22:10", "pills"))),
        "Alarm at noon please.",
        "I need to get up at 4:50 for my flight.",
        "Alarm at 7 sharp.",
        "Set an alarm for a quarter to eight.",
        "Wake me at ten past six tomorrow.",
        "Put an alarm at 23:59 named midnight.",
        "An alarm at 14:00 for the meeting.",
        "Set my alarm for 5 in the morning.",
    ],
}


def _calls(resource: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in resource.get("output", []) if isinstance(i, dict) and i.get("type") == "function_call"]


def _valid(resource: dict[str, Any], name: str) -> tuple[bool, str]:
    """Does the answer hold one call of ``name`` whose arguments validate? (and why not)"""
    calls = _calls(resource)
    if len(calls) != 1 or calls[0].get("name") != name:
        return False, f"{len(calls)} calls ({[c.get('name') for c in calls]}), status {resource.get('status')}"
    try:
        jsonschema.validate(json.loads(calls[0].get("arguments") or ""), TOOLS[name]["parameters"])
    except (TypeError, ValueError, jsonschema.ValidationError) as exc:
        return False, f"arguments {str(calls[0].get('arguments'))[:80]!r}: {str(exc).splitlines()[0][:120]}"
    return True, ""


def _answer(run: RunHandle, body: dict[str, Any], stream: bool) -> tuple[dict[str, Any] | None, list[str]]:
    """The final response object (stream: the terminal event's) and its schema / HTTP problems."""
    if not stream:
        r = gw_post(run, "/responses", body)
        if r.status_code != 200:
            return None, [f"HTTP {r.status_code}: {r.text[:200]}"]
        return r.json(), resource_errors(r.json())
    r, raw = gw_stream(run, "/responses", {**body, "stream": True})
    if r.status_code != 200:
        return None, [f"HTTP {r.status_code}: {raw[:200]!r}"]
    events = [e.json() for e in parse_events(raw)]
    final = events[-1].get("response") if events else None
    return (final if isinstance(final, dict) else None), stream_errors(events)


@check(
    "protocol.tools.schema_accuracy",
    required=False,
    engines=("sglang",),
    reason="the fake answers a forced call with the smallest valid arguments: its share says nothing of a model",
    description="forced tool calls over three tool schemas, stream and non-stream: the share whose arguments "
    "parse and validate against the tool's schema, with a Wilson 95 % interval (a measured figure)",
    summary=lambda d: (
        f"{d['successes']} of {d['n']} forced tool calls held arguments valid for the tool's schema: "
        f"{d['estimate']:.0%} (Wilson 95 % {d['low']:.0%} to {d['high']:.0%})"
    ),
)
def test_tool_schema_accuracy(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    by: dict[str, list[int]] = {}
    misses: list[str] = []
    broken: list[str] = []
    asks = [(name, prompt, stream) for name, prompts in PROMPTS.items() for prompt in prompts for stream in (False, True)]

    def ask(name: str, prompt: str, stream: bool) -> tuple[dict[str, Any] | None, list[str]]:
        tool = {"type": "function", "name": name, **TOOLS[name]}
        body = {
            "model": run.wire_model,
            "input": prompt,
            "tools": [tool],
            "tool_choice": {"type": "function", "name": name},
            "max_output_tokens": CALL_BUDGET,
        }
        return _answer(run, body, stream)

    # as many at once as the lock lets the engine run (its slots), answers read in the asks' order
    slots = max(1, session_lock(certify_env).execution.max_running_requests)
    with ThreadPoolExecutor(max_workers=slots) as pool:
        answers = list(pool.map(lambda a: ask(*a), asks))
    for (name, prompt, stream), (resource, problems) in zip(asks, answers, strict=True):
        broken += [f"{name} {prompt!r} stream={stream}: {p}" for p in problems]
        ok, why = _valid(resource or {}, name)
        tally = by.setdefault(f"{name}.{'stream' if stream else 'unary'}", [0, 0])
        tally[0] += ok
        tally[1] += 1
        if not ok and len(misses) < 12:
            misses.append(f"{name} stream={stream} {prompt!r}: {why}")
    certify_record.detail("concurrency", slots)
    successes, n = sum(t[0] for t in by.values()), sum(t[1] for t in by.values())
    figure = wilson_interval(successes, n)
    for key, value in figure.items():
        certify_record.detail(key, value)
    certify_record.detail("by_tool_and_mode", {k: {"successes": s, "n": m} for k, (s, m) in sorted(by.items())})
    certify_record.detail("misses", misses)
    certify_record.detail("budget", CALL_BUDGET)
    # at the lock's temperature 0 a prompt's stream and non-stream answers are usually the same generation
    certify_record.detail("distinct_prompts", sum(len(p) for p in PROMPTS.values()))
    certify_record.metric("protocol.tools.schema_accuracy", figure)
    assert n >= 100, f"only {n} forced calls were made"
    assert not broken, f"answers that were refused or do not conform: {broken[:5]}"
