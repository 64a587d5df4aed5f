"""The run page's summary, read first: the level and why, what was shown, what was not and why, the way to
``certified`` here, and the gateway's overhead in one sentence.

Everything comes from the signed predicate (``reasons``, ``to_certify``, ``checks``, the decided overhead
figure); nothing is computed that the evaluator did not decide. An entry signed before schema 3 has no
``to_certify`` and no decided overhead figure: the summary says so rather than inventing them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from harness.contracts.certification import check_status
from reports.figures import ms

__all__ = ["SUITE_CLAIMS", "verdict"]

# each suite's claim, in one line (what a pass of all its checks shows)
SUITE_CLAIMS = {
    "hardware": "runs on the requested device with the locked settings; the machine is recorded",
    "protocol": "Responses (to the Open Responses schema) and Chat Completions through the gateway, with exact usage and budgets",
    "correctness": "generates what the checkpoint generates under the reference implementation",
    "faults": "broken streams, crashes, hangs, memory kills: clear errors, then recovery",
    "security": "the gateway is the only door, open only to its run; no secret leaks",
    "lifecycle": "one shared engine; cancels free their slot; idle stop; a dead daemon cleaned up",
    "perf": "what the gateway adds, decided on intervals against the §15.4 bound",
    "agents": "the model-call harness, Codex and Harbor drive the endpoint end to end",
}
LEVEL_WORDS = {
    "certified": "Certified: a real engine from the catalog on a certifiable platform passed every required check.",
    "provisional": "Provisional: a real engine passed every required check, but something keeps it from certified here.",
    "contract": "Contract: the fake engine passed every required check. This proves the harness, not the hardware.",
    "failed": "Failed: a required check did not pass, or the session never got a usable engine.",
}
FAKE_WAY = "run the suites on a real engine (make certify) for a provisional or certified level"
# a reason about one check ("<id>: optional check skipped"): said under "not shown" instead of "why"
_CHECK_REASON = re.compile(r"^[a-z]+\.[a-z0-9_.]+: ")


def _reason_of(check: Mapping[str, Any]) -> str:
    details = check.get("details") if isinstance(check.get("details"), Mapping) else {}
    reason = str((details or {}).get("reason") or check.get("summary") or check.get("status") or "")
    first = reason.strip().split("\n", 1)[0].removeprefix("E ").strip().removeprefix("Skipped: ")
    return first.removeprefix(f"{check.get('id')}: ").removeprefix(f"{check.get('id')} ")


def _not_shown(checks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Checks that did not show their behaviour, grouped by why: skips by their reason's head, the model's
    limits, failures and checks that never ran."""
    groups: dict[str, list[dict[str, str]]] = {}
    for c in checks:
        status = check_status(c)
        details = c.get("details") if isinstance(c.get("details"), Mapping) else {}
        if status == "passed":
            continue
        if status == "not_applicable":
            head, why = "not applicable to this model", str((details or {}).get("not_applicable") or _reason_of(c))
        elif status == "skipped":
            reason = _reason_of(c)
            head, _, why = reason.partition(": ")
        elif status == "failed":
            head, why = "failed", _reason_of(c)
        else:
            head, why = "did not run", ""
        groups.setdefault(head, []).append({"id": str(c.get("id")), "why": why, "required": "yes" if c.get("required") else "no"})
    order = ("failed", "did not run", "not applicable to this model")
    keys = sorted(groups, key=lambda k: (order.index(k) if k in order else len(order), k))
    return [{"head": k, "checks": groups[k]} for k in keys]


def _ids(checks: list[str], most: int = 4) -> str:
    return ", ".join(checks[:most]) + (f" and {len(checks) - most} more" if len(checks) > most else "")


def _blocking(checks: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(why, action) per kind of required check that did not pass: failed, skipped, not run."""
    out = []
    for status, why, action in (
        ("failed", "{n} required check(s) failed: {ids}", "make the failed required checks pass ({ids})"),
        ("skipped", "{n} required check(s) skipped: {ids}", "provide what the skipped required checks need ({ids})"),
        ("not_run", "{n} required check(s) did not run: {ids}",
         "run every suite (pytest certify without -k); {n} required check(s) did not run"),
    ):  # fmt: skip
        ids = [str(c["id"]) for c in checks if c.get("required") and c.get("status") == status]
        if ids:
            out.append((why.format(n=len(ids), ids=_ids(ids)), action.format(n=len(ids), ids=_ids(ids))))
    return out


def _shown(checks: Sequence[Mapping[str, Any]], suites: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    for suite in suites:
        mine = [c for c in checks if str(c.get("id", "")).split(".", 1)[0] == suite]
        if not mine:
            continue
        passed = sum(1 for c in mine if check_status(c) == "passed")
        rows.append({"suite": suite, "passed": passed, "total": len(mine), "claim": SUITE_CLAIMS.get(suite, "")})
    return rows


def _overhead_sentence(metrics: Mapping[str, Any]) -> dict[str, Any] | None:
    """The decided overhead figure in words (schema 3), or a note for a schema-2 entry's bare difference."""
    headline = metrics.get("gateway_added_latency_ms")
    if not isinstance(headline, Mapping):
        return None
    if not isinstance(headline.get("unary"), Mapping):
        return {
            "verdict": None,
            "rows": [],
            "text": "This entry predates schema 3: it holds only the black-box percentile difference (gateway - direct, "
            "no interval), which is not what the gateway adds; see the figures below.",
        }
    rows = []
    for kind in ("unary", "stream"):
        k = headline[kind]
        res = k.get("residence_ms") or {}
        paired = k.get("paired_shift_ms") or {}
        rows.append(
            {
                "kind": kind,
                "p50": ms(res.get("p50")),
                "p95": ms(res.get("p95")),
                "paired": ms(paired, signed=True),
                "target": f"{paired.get('target_ms')} ms: {paired.get('verdict')}",
                "verdict": k.get("verdict"),
            }
        )
    return {"verdict": headline.get("verdict"), "rows": rows, "text": ""}


def verdict(results: Mapping[str, Any], suites: Sequence[str]) -> dict[str, Any]:
    """The page's ``verdict`` block from the predicate (see the module doc)."""
    level = str(results.get("level", "unknown"))
    checks = [c for c in results.get("checks", []) if isinstance(c, Mapping)]
    to_certify = results.get("to_certify")
    if level == "contract":
        way: list[str] | None = [FAKE_WAY]
    elif level == "failed":
        way = [action for _, action in _blocking(checks)] or None
    elif isinstance(to_certify, list):
        way = [str(a) for a in to_certify]
    else:
        way = None  # an entry before schema 3 did not record it
    metrics = results.get("metrics") if isinstance(results.get("metrics"), Mapping) else {}
    reasons = [str(r) for r in results.get("reasons", []) or []]
    why = [r for r in reasons if not _CHECK_REASON.match(r)]
    if level == "failed":
        why += [reason for reason, _ in _blocking(checks)]
    return {
        "level": level,
        "headline": LEVEL_WORDS.get(level, f"Level {level}."),
        "reasons": reasons,
        "why": why,
        "check_reasons": any(_CHECK_REASON.match(r) for r in reasons),
        "shown": _shown(checks, suites),
        "not_shown": _not_shown(checks),
        "way": way,
        "overhead": _overhead_sentence(metrics or {}),
    }
