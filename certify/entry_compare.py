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
- ``figure`` — a figure with a 95 % interval (in the metrics, or in the details of a ``perf`` check) decided by
  equivalence (:mod:`harness.compare.decide`): the difference of the two estimates, with the standard error of
  the two intervals combined as independent, against the margin of the figure's kind written in the *original*
  entry (``margins``; an entry before schema 4 has none and is decided by today's defaults, said in a note),
  Holm-corrected over all the figures. ``differs`` is a difference; ``inconclusive`` leaves the verdict
  ``inconclusive`` unless the figure is one the entries themselves mark unreliable (too few samples for that
  percentile: shown and decided, not material).

The verdict (:attr:`EntryComparison.verdict`): ``differs`` when there is any difference, else ``inconclusive``
when a material figure is, else ``reproduced``.

Across machines: the two entries' machine identities (:func:`harness.app.inventory.machine_identity` of
their ``hardware``: CPU, ISA, cores, memory, host, GPU and driver — not load) are compared too
(:attr:`EntryComparison.machine`). On another machine a timing figure (latency, throughput, gateway time) is
expected to move with the machine: each difference is attributed (:meth:`EntryComparison.causes`) to the machine
(a timing figure, machines differ) or to the engine (everything else: a level, a check, a token, a logprob —
or any timing figure on the same machine), and the answer says which.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from certify.kit.correctness import MATCH_TOL
from harness.app.inventory import machine_identity
from harness.compare.decide import Decision, Overall, Question, decide, overall, se_of_interval
from harness.contracts.certification import check_status
from harness.contracts.margins import FigureKind, MarginV1
from harness.errors import HitchError

__all__ = [
    "Difference",
    "EntryComparison",
    "check_changes",
    "compare_entries",
    "continuation_difference",
    "entry_margins",
    "figure_kind",
    "interval_figures",
    "machine_differences",
]

_TIMING = frozenset({"latency", "throughput", "gateway_time"})
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
    figures: list[Decision] = field(default_factory=list)
    machine: list[str] = field(default_factory=list)  # how the machine identities differ (empty: the same machine)

    @property
    def verdict(self) -> Overall:
        return overall(self.figures, other_differences=bool(self.differences))

    @property
    def reproduced(self) -> bool:
        return self.verdict == "reproduced"

    def to_decide(self) -> list[str]:
        """What would decide each material inconclusive figure."""
        return [
            f"{d.name}: {f'about {d.samples_needed} samples' if d.samples_needed else 'more samples'} in each entry ({d.why})"
            for d in self.figures
            if d.verdict == "inconclusive" and d.material
        ]

    def causes(self) -> dict[str, list[str]]:
        """Each difference's item under what it is attributed to: ``machine`` or ``engine`` (module docstring)."""
        kinds = {d.name: d.kind for d in self.figures}
        out: dict[str, list[str]] = {"machine": [], "engine": []}
        for d in self.differences:
            timing = d.kind == "figure" and kinds.get(d.item) in _TIMING
            out["machine" if timing and self.machine else "engine"].append(d.item)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "machine": {"same": not self.machine, "differs": self.machine},
            "causes": self.causes(),
            "differences": [d.to_json() for d in self.differences],
            "inconclusive": [d.name for d in self.figures if d.verdict == "inconclusive" and d.material],
            "to_decide": self.to_decide(),
            "figures": {d.name: d.to_json() for d in self.figures},
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


def figure_kind(name: str) -> FigureKind:
    """The kind of an entry's interval figure, by its name (every figure a suite records today is one of these)."""
    leaf = name.lower()
    if leaf.startswith("perf.") and leaf.count(".") >= 3:
        leaf = leaf.split(".", 3)[3]  # the figure under its check's id (perf.overhead.* names the suite, not the figure)
    if "direct" in leaf:
        return "latency"  # the engine's own time, measured without the gateway
    if any(word in leaf for word in ("gateway", "residence", "added", "shift", "difference", "overhead")):
        return "gateway_time"
    if "rps" in leaf or "throughput" in leaf:
        return "throughput"
    if "tokens" in leaf:
        return "token_count"
    return "latency"


def entry_margins(predicate: dict[str, Any]) -> dict[str, MarginV1] | None:
    """The margins an entry was published with (schema 4), or None."""
    raw = predicate.get("margins")
    if not isinstance(raw, dict):
        return None
    return {str(k): MarginV1.model_validate(v) for k, v in raw.items()}


def _question(name: str, x: dict[str, Any], y: dict[str, Any]) -> Question:
    ex, ey = x.get("estimate"), y.get("estimate")
    sx, sy = se_of_interval(x["low"], x["high"]), se_of_interval(y["low"], y["high"])
    diff = float(ey) - float(ex) if _number(ex) and _number(ey) else None  # type: ignore[arg-type]
    se = (sx**2 + sy**2) ** 0.5 if sx is not None and sy is not None else None
    n = min(int(x.get("n") or 0), int(y.get("n") or 0))
    reliable = x.get("reliable") is not False and y.get("reliable") is not False
    why = "" if reliable else "too few samples for this percentile in the entries themselves"
    return Question(name, figure_kind(name), diff, se, n, ex if _number(ex) else None, reliable, why)


def _compare_figures(a: dict[str, Any], b: dict[str, Any], checks: set[str], out: EntryComparison) -> None:
    fa, fb = _figures(a, checks), _figures(b, checks)
    for name in sorted(set(fa) ^ set(fb)):
        out.notes.append(f"{name}: an interval in only one entry, not compared")
    margins = entry_margins(a)
    if margins is None:
        out.notes.append("the original entry records no margins (before schema 4): decided by today's default margins")
    questions = [_question(name, fa[name], fb[name]) for name in sorted(set(fa) & set(fb))]
    out.figures = decide(questions, margins)
    for d in out.figures:
        if d.verdict == "differs":
            x, y = fa[d.name], fb[d.name]
            out.differences.append(
                Difference(
                    "figure", d.name, [x["low"], x["high"]], [y["low"], y["high"]],
                    f"{d.name}: [{x['low']:.4g}, {x['high']:.4g}] then [{y['low']:.4g}, {y['high']:.4g}]: {d.why}",
                )
            )  # fmt: skip
        elif d.verdict == "inconclusive" and not d.material:
            out.notes.append(f"{d.name}: not decided, not material ({d.why}; {d.kind} margin {d.margin:.4g})")
    out.compared["figures"] = len(questions)


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


def machine_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """How the two entries' machine identities differ, one line per field (empty: the same machine)."""

    def flat(value: Any, path: str) -> dict[str, Any]:
        if isinstance(value, dict):
            return {k: v for key, sub in value.items() for k, v in flat(sub, f"{path}.{key}" if path else key).items()}
        return {path: value}

    ha, hb = a.get("hardware"), b.get("hardware")
    fa = flat(machine_identity(ha if isinstance(ha, dict) else {}), "")
    fb = flat(machine_identity(hb if isinstance(hb, dict) else {}), "")
    return [f"{k}: {fa.get(k)} then {fb.get(k)}" for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


def compare_entries(original: dict[str, Any], new: dict[str, Any], *, selection: bool = False) -> EntryComparison:
    """Every difference between ``original``'s predicate and its reproduction ``new`` (see the module docstring).

    ``selection``: the reproduction ran only some checks (``-k``): only those that ran (not ``not_run``) are
    compared, and the level is not. One entry compared with itself is refused (``comparison_with_itself``)."""
    if original == new:
        raise HitchError(
            "comparison_with_itself",
            "an entry compared with itself: a reproduction is a second certification of its lock",
            {"inference_id": original.get("inference_id"), "finished_at": original.get("finished_at")},
        )
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
    out.machine = machine_differences(original, new)
    if out.machine:
        out.notes.append(f"another machine ({len(out.machine)} identity field(s) differ): timing differences are the machine's")
    return out
