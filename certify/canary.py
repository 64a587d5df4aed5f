"""The hardware canary's comparison: a new signed entry against the last one of the same combination.

``python -m certify.canary --entry NEW.dsse.json --history DIR --keys DIR [--keys DIR ...]``

The new entry must verify (else exit 2). Every ``*.dsse.json`` under ``--history`` (recursively, so
downloaded artifact folders work) is verified against the same keys; one that does not verify is ignored
with a warning on stderr — a tampered or foreign entry can never become the baseline. Of the verified
entries with the same ``runtime_id`` x ``model_id`` x ``profile`` x ``device`` as the new one (the new
entry itself excluded by payload digest), the latest is the baseline: by the signed ``finished_at``,
else by file modification time.

Regressions (exit 1):

- the new entry's level is ``failed``, with or without a baseline: a first entry that failed, or a
  combination that stays failed, fails the canary every time (a canary that only watched changes would stay
  green on a machine that never worked);
- a check that passed in the baseline and does not pass now (failed, skipped, not run, or gone);
- the decided overhead figure (``metrics.gateway_added_latency_ms``, schema 3), per kind (unary, stream):
  the time in the gateway at p95 worse by more than ``--max-p95-increase`` (default 20 %) of the baseline's
  value *and* told apart from noise (the new interval's lower end above the baseline's upper end);
  ``--min-p95-delta-ms`` (default 0) is a floor: an increase no larger than it is never a regression;
- the §15.4 verdict ``within`` before and ``over`` now, or the paired shift's target ``met`` before and
  ``missed`` now.

The black-box percentile difference (``gateway_latency_difference_ms``) is never compared: its interval is
mostly the engine's own variance. A baseline signed before schema 3 holds only that difference: the overhead
is then not compared, and the note says why.

No baseline and a level other than ``failed`` → exit 0 with a note. A table goes to stdout; ``--json``
prints the verdict as JSON instead, ``--out FILE`` also writes it there.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from catalog.signing import ENTRY_SUFFIX, load_entry, payload_bytes, verify_envelope
from harness.errors import HitchError

__all__ = ["Baseline", "Verdict", "compare", "failed_level", "find_baseline", "main"]

MATCH_FIELDS = ("runtime_id", "model_id", "profile", "device")
OVERHEAD_METRIC = "gateway_added_latency_ms"
KINDS = ("unary", "stream")


@dataclass(frozen=True)
class Baseline:
    path: Path
    predicate: dict[str, Any]
    order: tuple[float, float]  # (finished_at epoch or -inf, mtime)


@dataclass
class Verdict:
    entry: Path
    baseline: Path | None
    regressions: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "entry": str(self.entry),
            "baseline": str(self.baseline) if self.baseline else None,
            "regressed": self.regressed,
            "regressions": self.regressions,
            "rows": self.rows,
            "notes": self.notes,
            "warnings": self.warnings,
        }


def _finished_epoch(predicate: dict[str, Any]) -> float:
    value = predicate.get("finished_at")
    if not isinstance(value, str):
        return float("-inf")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return float("-inf")
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _payload_digest(envelope: dict[str, Any]) -> str | None:
    try:
        return hashlib.sha256(payload_bytes(envelope)).hexdigest()
    except HitchError:
        return None


def find_baseline(
    new: dict[str, Any], new_digest: str | None, history: Path, keys: Sequence[Path], warnings: list[str]
) -> Baseline | None:
    """The latest verified entry under ``history`` of the same combination as predicate ``new``."""
    best: Baseline | None = None
    if not history.is_dir():
        return None
    for path in sorted(history.rglob(f"*{ENTRY_SUFFIX}")):
        try:
            envelope = load_entry(path)
            predicate = verify_envelope(envelope, list(keys)).predicate
        except HitchError as exc:
            warnings.append(f"ignored {path}: does not verify ({exc.details.get('reason') or exc.message})")
            continue
        if _payload_digest(envelope) == new_digest:
            continue  # the new entry itself, or a copy of it
        if any(predicate.get(f) != new.get(f) for f in MATCH_FIELDS):
            continue
        candidate = Baseline(path, predicate, (_finished_epoch(predicate), path.stat().st_mtime))
        if best is None or candidate.order > best.order:
            best = candidate
    return best


def _statuses(predicate: dict[str, Any]) -> dict[str, str]:
    checks = predicate.get("checks") or []
    return {str(c["id"]): str(c.get("status", "not_run")) for c in checks if isinstance(c, dict) and "id" in c}


def _decided(predicate: dict[str, Any]) -> dict[str, Any] | None:
    """The decided overhead figure (schema 3), or None (an older entry, or no perf suite in the run)."""
    metric = (predicate.get("metrics") or {}).get(OVERHEAD_METRIC)
    if isinstance(metric, dict) and all(isinstance(metric.get(k), dict) for k in KINDS):
        return metric
    return None


def _fmt(c: dict[str, Any]) -> str:
    if c.get("estimate") is None:
        return "-"
    return f"{c['estimate']:.3f} [{c['low']:.3f}, {c['high']:.3f}]"


def _compare_overhead(
    new: dict[str, Any], old: dict[str, Any], max_increase: float, min_delta_ms: float
) -> tuple[list[str], list[dict[str, Any]]]:
    regressions: list[str] = []
    rows: list[dict[str, Any]] = []
    for kind in KINDS:
        before, now = old[kind], new[kind]
        name = f"{OVERHEAD_METRIC}.{kind}"
        b, n = before["residence_ms"]["p95"], now["residence_ms"]["p95"]
        verdict = "ok"
        if None not in (b["estimate"], n["estimate"], b["high"], n["low"]):
            limit = b["estimate"] + max(max_increase * abs(b["estimate"]), min_delta_ms)
            if n["estimate"] > limit and n["low"] > b["high"]:
                verdict = "REGRESSION"
                regressions.append(
                    f"{name}.residence_ms.p95 (time in the gateway): {n['estimate']:.3f} ms > {limit:.3f} ms "
                    f"(baseline {b['estimate']:.3f} ms + {max_increase:.0%}), interval [{n['low']:.3f}, {n['high']:.3f}] "
                    f"clear of the baseline's [{b['low']:.3f}, {b['high']:.3f}]"
                )
        rows.append({"item": f"{name}.residence_ms.p95 (ms)", "before": _fmt(b), "now": _fmt(n), "verdict": verdict})
        for label, was, is_, good, bad in (
            ("§15.4", before["verdict"], now["verdict"], "within", "over"),
            ("paired shift target", before["paired_shift_ms"]["verdict"], now["paired_shift_ms"]["verdict"], "met", "missed"),
        ):
            verdict = "REGRESSION" if (was, is_) == (good, bad) else "ok"
            if verdict == "REGRESSION":
                why = f": {'; '.join(now['over'])}" if bad == "over" and now["over"] else ""
                regressions.append(f"{name} {label}: {was} before, {is_} now{why}")
            rows.append({"item": f"{name} {label}", "before": was, "now": is_, "verdict": verdict})
    return regressions, rows


def compare(
    new: dict[str, Any], old: dict[str, Any], *, max_increase: float = 0.20, min_delta_ms: float = 0.0
) -> tuple[list[str], list[dict[str, Any]], list[str]]:
    """(regressions, table rows, notes) of predicate ``new`` against baseline predicate ``old``."""
    regressions: list[str] = []
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    before, now = _statuses(old), _statuses(new)
    for cid in sorted(set(before) | set(now)):
        was, is_ = before.get(cid, "absent"), now.get(cid, "absent")
        verdict = "ok"
        if was == "passed" and is_ != "passed":
            verdict = "REGRESSION"
            regressions.append(f"{cid}: passed before, {is_} now")
        elif was != "passed" and is_ == "passed":
            verdict = "fixed"
        if was != is_ or verdict != "ok":
            rows.append({"item": cid, "before": was, "now": is_, "verdict": verdict})
    old_overhead, new_overhead = _decided(old), _decided(new)
    if old_overhead is None or new_overhead is None:
        which = "the baseline" if old_overhead is None else "the new entry"
        notes.append(
            f"{OVERHEAD_METRIC}: {which} has no decided overhead figure (schema 3: time in the gateway, paired "
            "shift, verdict): the overhead is not compared (a black-box difference never is)"
        )
    else:
        found, overhead_rows = _compare_overhead(new_overhead, old_overhead, max_increase, min_delta_ms)
        regressions += found
        rows += overhead_rows
    return regressions, rows, notes


def failed_level(new: dict[str, Any]) -> str | None:
    """The regression line for an entry whose level is ``failed`` (None otherwise)."""
    if new.get("level") != "failed":
        return None
    reasons = [str(r) for r in (new.get("reasons") or [])][:3]
    return "level: failed" + (f" ({'; '.join(reasons)})" if reasons else "")


def run(entry: Path, history: Path, keys: Sequence[Path], *, max_increase: float = 0.20, min_delta_ms: float = 0.0) -> Verdict:
    """Verify ``entry``, find its baseline in ``history`` and compare (raises HitchError if ``entry`` is bad)."""
    envelope = load_entry(entry)
    new = verify_envelope(envelope, list(keys)).predicate
    verdict = Verdict(entry, None)
    baseline = find_baseline(new, _payload_digest(envelope), history, keys, verdict.warnings)
    combo = " x ".join(f"{f}={str(new.get(f))[:19]}" for f in MATCH_FIELDS)
    level = failed_level(new)
    if baseline is None:
        verdict.notes.append(f"no previous verified entry for {combo} under {history}: nothing to compare")
        verdict.regressions = [level] if level else []
        return verdict
    verdict.baseline = baseline.path
    verdict.regressions, verdict.rows, verdict.notes = compare(
        new, baseline.predicate, max_increase=max_increase, min_delta_ms=min_delta_ms
    )
    if level:
        verdict.regressions.insert(0, level)
    verdict.notes.insert(0, f"baseline: {baseline.path} (level {baseline.predicate.get('level')}, now {new.get('level')})")
    return verdict


def render(verdict: Verdict) -> str:
    lines = [f"canary: {verdict.entry}"]
    lines += [f"note: {n}" for n in verdict.notes]
    if verdict.rows:
        widths = {k: max(len(k), *(len(str(r[k])) for r in verdict.rows)) for k in ("item", "before", "now", "verdict")}
        lines.append("  ".join(k.ljust(w) for k, w in widths.items()))
        lines.append("  ".join("-" * w for w in widths.values()))
        lines += ["  ".join(str(r[k]).ljust(w) for k, w in widths.items()) for r in verdict.rows]
    elif verdict.baseline is not None:
        lines.append("every check has the same status as in the baseline")
    lines.append(f"RESULT: REGRESSION ({len(verdict.regressions)})" if verdict.regressed else "RESULT: no regression")
    lines += [f"  - {r}" for r in verdict.regressions]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m certify.canary", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--entry", type=Path, required=True, help="the new signed entry (*.dsse.json)")
    p.add_argument("--history", type=Path, required=True, help="directory of earlier signed entries (searched recursively)")
    p.add_argument("--keys", type=Path, action="append", required=True, help="trusted public-key dir (repeatable)")
    p.add_argument(
        "--max-p95-increase",
        type=float,
        default=0.20,
        help="allowed relative increase of the time in the gateway at p95 (0.20 = 20%%)",
    )
    p.add_argument("--min-p95-delta-ms", type=float, default=0.0, help="noise floor: smaller increases never fail")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("--out", type=Path, default=None, help="also write the verdict JSON here")
    args = p.parse_args(argv)
    try:
        verdict = run(args.entry, args.history, args.keys, max_increase=args.max_p95_increase, min_delta_ms=args.min_p95_delta_ms)
    except HitchError as exc:
        print(f"canary: the new entry {args.entry} is not usable: {exc.message}", file=sys.stderr)
        return 2
    for warning in verdict.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    data = verdict.to_dict()
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(json.dumps(data, indent=2) if args.json else render(verdict))
    return 1 if verdict.regressed else 0


if __name__ == "__main__":
    raise SystemExit(main())
