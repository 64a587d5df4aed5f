"""Two signed entries of the same lock compared item by item: what ``hitch catalog reproduce`` decides on.

:func:`compare_entries` takes the original entry's predicate and its reproduction's and lists every
:class:`Difference` (an empty list is ``reproduced``):

- ``level`` — the two levels differ (not compared when the reproduction ran a selection of the checks: a
  selection cannot reach the level of a full run);
- ``check`` — a check's status differs (:func:`check_changes`, which the canary reads too). A check the original
  entry does not have (a newer suite) is a note; one it has that the reproduction lacks is a difference;
- ``continuation`` — a greedy continuation of ``correctness.continuations`` differs: the first token (or, when
  the engine gave no tokens, the first character) where they part, named with its API and prompt;
- ``logprob`` — the same continuation, but a token's logprob moved by more than
  :data:`~certify.kit.correctness.MATCH_TOL` (the correctness suite's own tolerance between two computations
  of the same token);
- ``parity`` — ``correctness.parity.{api}`` diverges from the reference at another position, or its largest
  logprob gap to the reference moved by more than that tolerance;
- ``figure`` — a figure with a 95 % interval (in the metrics, or in the details of a ``perf`` check) whose two
  intervals do not overlap: beyond noise. A figure without an interval, or marked unreliable (too few samples),
  is listed as a note, never as a difference.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from certify.kit.correctness import MATCH_TOL
from harness.contracts.certification import check_status

__all__ = ["Difference", "EntryComparison", "check_changes", "compare_entries", "continuation_difference", "interval_figures"]

Kind = Literal["level", "check", "continuation", "logprob", "parity", "figure"]
CONTINUATIONS = "correctness.continuations"


@dataclass(frozen=True)
class Difference:
    kind: Kind
    item: str
    before: Any
    now: Any
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "item": self.item, "before": self.before, "now": self.now, "detail": self.detail}


@dataclass
class EntryComparison:
    differences: list[Difference] = field(default_factory=list)
    compared: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def reproduced(self) -> bool:
        return not self.differences

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": "reproduced" if self.reproduced else "differs",
            "differences": [d.to_json() for d in self.differences],
            "compared": self.compared,
            "notes": self.notes,
        }


def _checks(predicate: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(c["id"]): c for c in predicate.get("checks") or [] if isinstance(c, dict) and "id" in c}


def check_changes(before: dict[str, Any], now: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(check id, status before, status now)`` for every check whose status differs (``absent`` when missing).
    Statuses as :func:`~harness.contracts.certification.check_status` reads them: a schema-3 ``passed`` that
    recorded ``not_applicable`` is ``not_applicable``, so it is no change against a schema-4 entry."""
    was, is_ = _checks(before), _checks(now)
    out = []
    for cid in sorted(set(was) | set(is_)):
        a = check_status(was[cid]) if cid in was else "absent"
        b = check_status(is_[cid]) if cid in is_ else "absent"
        if a != b:
            out.append((cid, a, b))
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def interval_figures(value: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every mapping under ``value`` holding a numeric ``low`` and ``high`` (an interval figure), by dotted path."""
    if isinstance(value, dict):
        if _number(value.get("low")) and _number(value.get("high")):
            yield path, value
            return
        for key, sub in value.items():
            yield from interval_figures(sub, f"{path}.{key}" if path else str(key))


def _figures(predicate: dict[str, Any], checks: set[str]) -> dict[str, dict[str, Any]]:
    found = dict(interval_figures(predicate.get("metrics") or {}, "metrics"))
    for cid, check in _checks(predicate).items():
        if cid.startswith("perf.") and cid in checks:
            found.update(interval_figures(check.get("details") or {}, cid))
    return found


def _compare_figures(a: dict[str, Any], b: dict[str, Any], checks: set[str], out: EntryComparison) -> None:
    fa, fb = _figures(a, checks), _figures(b, checks)
    for name in sorted(set(fa) ^ set(fb)):
        out.notes.append(f"{name}: an interval in only one entry, not compared")
    compared = 0
    for name in sorted(set(fa) & set(fb)):
        x, y = fa[name], fb[name]
        if x.get("reliable") is False or y.get("reliable") is False:
            out.notes.append(f"{name}: too few samples for a reliable interval, not compared")
            continue
        compared += 1
        if x["high"] < y["low"] or y["high"] < x["low"]:
            out.differences.append(
                Difference(
                    "figure", name, [x["low"], x["high"]], [y["low"], y["high"]],
                    f"{name}: [{x['low']:.4g}, {x['high']:.4g}] then [{y['low']:.4g}, {y['high']:.4g}]: the intervals do "
                    "not overlap (beyond noise)",
                )
            )  # fmt: skip
    out.compared["figures"] = compared


def _first_difference(a: Any, b: Any) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def continuation_difference(row_a: dict[str, Any], row_b: dict[str, Any]) -> Difference | None:
    where = f"{row_a['api']} prompt {row_a['prompt']} ({str(row_a.get('prompt_text', ''))[:30]!r})"
    item = f"{CONTINUATIONS}/{row_a['api']}/{row_a['prompt']}"
    ta, tb = row_a.get("tokens"), row_b.get("tokens")
    if ta is not None and tb is not None:
        if ta != tb:
            i = _first_difference(ta, tb)
            before, now = (ta[i] if i < len(ta) else None), (tb[i] if i < len(tb) else None)
            return Difference("continuation", item, before, now, f"{where}: token {i} differs ({before!r} then {now!r})")
        la, lb = row_a.get("logprobs") or [], row_b.get("logprobs") or []
        gaps = [abs(x - y) for x, y in zip(la, lb, strict=False)]
        worst = max(range(len(gaps)), key=gaps.__getitem__, default=None)
        if worst is not None and gaps[worst] > MATCH_TOL:
            return Difference(
                "logprob", item, la[worst], lb[worst],
                f"{where}: token {worst} logprob {la[worst]:.4f} then {lb[worst]:.4f} (> {MATCH_TOL} nats)",
            )  # fmt: skip
        return None
    xa, xb = str(row_a.get("text") or ""), str(row_b.get("text") or "")
    if xa != xb or row_a.get("output_tokens") != row_b.get("output_tokens"):
        i = _first_difference(xa, xb)
        return Difference(
            "continuation", item, xa[i : i + 12], xb[i : i + 12], f"{where}: the text differs from character {i} on"
        )
    return None


def _compare_continuations(a: dict[str, Any], b: dict[str, Any], out: EntryComparison) -> None:
    rows_a = {
        (r["api"], r["prompt"]): r for r in (_checks(a).get(CONTINUATIONS, {}).get("details") or {}).get("continuations") or []
    }
    rows_b = {
        (r["api"], r["prompt"]): r for r in (_checks(b).get(CONTINUATIONS, {}).get("details") or {}).get("continuations") or []
    }
    if set(rows_a) != set(rows_b):
        out.notes.append(f"{CONTINUATIONS}: {len(rows_a)} continuations then {len(rows_b)}; the common ones are compared")
    common = sorted(set(rows_a) & set(rows_b))
    for key in common:
        found = continuation_difference(rows_a[key], rows_b[key])
        if found is not None:
            out.differences.append(found)
    out.compared["continuations"] = len(common)


def _compare_parity(a: dict[str, Any], b: dict[str, Any], checks: set[str], out: EntryComparison) -> None:
    ca, cb = _checks(a), _checks(b)
    for cid in sorted(c for c in checks if c.startswith("correctness.parity.") and c in ca and c in cb):
        pa = (ca[cid].get("details") or {}).get("prompts") or []
        pb = (cb[cid].get("details") or {}).get("prompts") or []
        for i, (x, y) in enumerate(zip(pa, pb, strict=False)):
            if x.get("diverged_at") != y.get("diverged_at"):
                was, now = x.get("diverged_at"), y.get("diverged_at")
                detail = f"{cid} prompt {i}: diverges from the reference at {was} then {now}"
                out.differences.append(Difference("parity", f"{cid}/{i}", was, now, detail))
            elif _number(x.get("max_match_gap")) and _number(y.get("max_match_gap")):
                moved = abs(x["max_match_gap"] - y["max_match_gap"])
                if moved > MATCH_TOL:
                    out.differences.append(
                        Difference("parity", f"{cid}/{i}", x["max_match_gap"], y["max_match_gap"],
                                   f"{cid} prompt {i}: largest logprob gap to the reference moved by {moved:.4f} nats")
                    )  # fmt: skip


def compare_entries(original: dict[str, Any], new: dict[str, Any], *, selection: bool = False) -> EntryComparison:
    """Every difference between ``original``'s predicate and its reproduction ``new`` (see the module docstring).

    ``selection``: the reproduction ran only some checks (``-k``): only those that ran (not ``not_run``) are
    compared, and the level is not."""
    out = EntryComparison()
    ran = {cid for cid, c in _checks(new).items() if c.get("status") != "not_run"}
    checks = ran if selection else set(_checks(original)) | set(_checks(new))
    if selection:
        out.notes.append(f"a selection of {len(ran)} check(s) ran: the level is not compared")
    elif original.get("level") != new.get("level"):
        out.differences.append(
            Difference(
                "level",
                "level",
                original.get("level"),
                new.get("level"),
                f"level {original.get('level')} then {new.get('level')}",
            )
        )
    compared = 0
    for cid, was, is_ in check_changes(original, new):
        if cid not in checks:
            continue
        if was == "absent":
            out.notes.append(f"{cid}: not in the original entry (a newer suite), {is_} now")
            continue
        out.differences.append(Difference("check", cid, was, is_, f"{cid}: {was} then {is_}"))
    compared = len(checks & set(_checks(original)))
    out.compared["checks"] = compared
    if CONTINUATIONS in checks:
        _compare_continuations(original, new, out)
    _compare_parity(original, new, checks, out)
    _compare_figures(original, new, checks, out)
    return out
