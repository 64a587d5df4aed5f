"""The overhead figures from the rounds: added percentiles with intervals, the §15.4 decision, the table.

Per kind (unary, stream) and per arm other than direct:

- ``added_latency_ms`` {p50,p95,p99}: per round, arm percentile - direct percentile of E2E; the median over
  rounds (robust to one disturbed round); ``added_latency_ms_rounds`` keeps each round's figure;
- ``added_latency_ci_ms``: the same difference over the samples of every round pooled (``rounds x n_c1``
  per arm, stated as ``n``) with its bootstrap 95 % interval (:func:`certify.stats.added_intervals`); a p99
  from fewer than 100 samples per arm is marked unreliable; an interval that holds 0 marks the difference
  as noise — a negative added figure is never a speed-up by itself;
- streams also: ``ttft_added_ms`` / ``ttft_added_ci_ms`` and ``itl_added_ms`` / ``itl_added_ci_ms``
  (definitions in :mod:`certify.perf.reading`); ``e2e_ratio`` arm / direct per percentile;
- ``rps_c32`` (requests/s at concurrency C: the key keeps its historical name, ``concurrency`` states C),
  ``throughput_ratio_vs_direct_c32``, ``cpu_ms_per_request_c32`` / ``_c1`` (the proxy process).

**The §15.4 pass line is decided on the interval**: for E2E (each kind) and TTFT, the *upper end* of the
95 % interval of the added p50 and p95 must be <= max(20 ms, 5 % of the direct figure). Within it, the
arm's cost is below the bound with 95 % confidence; a point estimate under the bound with an interval
reaching over it does not pass.
"""

from __future__ import annotations

import statistics
from typing import Any

from certify.perf.loops import KINDS, Plan, Round, pooled
from certify.stats import added_intervals, percentile

__all__ = ["FLOOR_MS", "FRACTION", "QS", "bound_ms", "over_bound", "render", "summarize"]

FLOOR_MS = 20.0
FRACTION = 0.05
QS = {"p50": 0.5, "p95": 0.95, "p99": 0.99}
_BOUNDED = ("p50", "p95")


def bound_ms(direct_ms: float) -> float:
    """The §15.4 bound for a figure whose direct value is ``direct_ms``."""
    return max(FLOOR_MS, FRACTION * direct_ms)


def _round_percentiles(rounds: list[Round], kind: str, arm: str, field: str, q: float) -> list[float]:
    out = []
    for rd in rounds:
        values = [v for s in rd.c1[kind][arm] if (v := getattr(s, field)) is not None]
        out.append(percentile(values, q) * 1000)
    return out


def _added(rounds: list[Round], kind: str, arm: str, field: str) -> tuple[dict[str, float], dict[str, list[float]]]:
    per_round = {
        p: [
            a - d
            for a, d in zip(
                _round_percentiles(rounds, kind, arm, field, q),
                _round_percentiles(rounds, kind, "direct", field, q),
                strict=True,
            )
        ]
        for p, q in QS.items()
    }
    return {p: statistics.median(v) for p, v in per_round.items()}, {p: [round(x, 3) for x in v] for p, v in per_round.items()}


def _direct(rounds: list[Round], kind: str, field: str) -> dict[str, float]:
    return {p: statistics.median(_round_percentiles(rounds, kind, "direct", field, q)) for p, q in QS.items()}


def _intervals(rounds: list[Round], kind: str, arm: str, field: str) -> dict[str, dict[str, Any]]:
    return added_intervals(pooled(rounds, kind, "direct", field), pooled(rounds, kind, arm, field), QS, scale=1000.0)


def _tokens(rounds: list[Round], kind: str, arm: str) -> dict[str, Any]:
    tokens = [s.tokens for rd in rounds for s in rd.c1[kind][arm] if s.tokens is not None]
    return {"completion_tokens": sorted(set(tokens)), "completion_tokens_median": statistics.median(tokens) if tokens else None}


def summarize(rounds: list[Round], plan: Plan, retries: dict[str, int], permits: int | None = None) -> dict[str, Any]:
    med = statistics.median
    arms = list(rounds[0].c1[KINDS[0]])
    results: dict[str, Any] = {}
    for kind in KINDS:
        direct = _direct(rounds, kind, "e2e")
        di_rps = [rd.rps[kind]["direct"] for rd in rounds]
        section: dict[str, Any] = {
            "direct": {f"{p}_ms": v for p, v in direct.items()} | {"rps_c32": med(di_rps)} | _tokens(rounds, kind, "direct")
        }
        if kind == "stream":
            section["direct"]["ttft_ms"] = _direct(rounds, kind, "ttft")
            section["direct"]["itl_ms"] = _direct(rounds, kind, "itl")
            section["direct"]["streams_without_content"] = sum(
                s.ttft is None for rd in rounds for a in arms for s in rd.c1[kind][a]
            )
        for arm in arms:
            if arm == "direct":
                continue
            added, added_rounds = _added(rounds, kind, arm, "e2e")
            rps = [rd.rps[kind][arm] for rd in rounds]
            entry: dict[str, Any] = {
                "added_latency_ms": added,
                "added_latency_ms_rounds": added_rounds,
                "added_latency_ci_ms": _intervals(rounds, kind, arm, "e2e"),
                "e2e_ratio": {p: (direct[p] + added[p]) / direct[p] if direct[p] else None for p in QS},
                "bound_ms": {p: bound_ms(direct[p]) for p in _BOUNDED},
                "rps_c32": med(rps),
                "throughput_ratio_vs_direct_c32": med(a / d for a, d in zip(rps, di_rps, strict=True)),
                "cpu_ms_per_request_c32": med(rd.cpu_ms_conc[kind][arm] for rd in rounds),
                "cpu_ms_per_request_c1": med(rd.cpu_ms_c1[kind][arm] for rd in rounds),
            } | _tokens(rounds, kind, arm)
            if kind == "stream":
                d_ttft = section["direct"]["ttft_ms"]
                entry["ttft_added_ms"], entry["ttft_added_ms_rounds"] = _added(rounds, kind, arm, "ttft")
                entry["ttft_added_ci_ms"] = _intervals(rounds, kind, arm, "ttft")
                entry["ttft_bound_ms"] = {p: bound_ms(d_ttft[p]) for p in _BOUNDED}
                entry["itl_added_ms"], _ = _added(rounds, kind, arm, "itl")
                entry["itl_added_ci_ms"] = _intervals(rounds, kind, arm, "itl")
            section[arm] = entry
        if "reference" in section:
            g, ref = section["gateway"], section["reference"]
            section["gateway_vs_reference"] = {
                "throughput_ratio_c32": med(rd.rps[kind]["gateway"] / rd.rps[kind]["reference"] for rd in rounds),
                "cpu_ratio_c32": g["cpu_ms_per_request_c32"] / ref["cpu_ms_per_request_c32"]
                if ref["cpu_ms_per_request_c32"]
                else None,
            }
        results[kind] = section
    return {
        "schema_version": "2",
        "kind": "gateway-overhead",
        "rounds": plan.rounds,
        "requests_c1": plan.n_c1,
        "samples_per_arm": plan.pooled,
        "requests_concurrent": plan.n_conc,
        "concurrency": plan.concurrency,
        "engine_permits": permits,
        "max_tokens": plan.max_tokens,
        "engine_queue_full_retries": retries,
        "results": results,
    }


def over_bound(entry: dict[str, Any], ci_key: str, bound_key: str, label: str) -> list[str]:
    """The §15.4 decision on the interval (see the module doc): what is over, as sentences (empty: within)."""
    over = []
    for p in _BOUNDED:
        ci, bound = entry[ci_key][p], entry[bound_key][p]
        if ci["high"] is None or ci["high"] > bound:
            over.append(
                f"{label}{p}: +{ci['estimate']} ms, 95 % interval [{ci['low']}, {ci['high']}] ms over "
                f"{bound:.2f} ms (n={ci['n']} per arm)"
            )
    return over


def _interval(p: str, c: dict[str, Any]) -> str:
    if c["estimate"] is None:
        return f"{p} -"
    text = f"{p} {c['estimate']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]"
    if c["noise"]:
        text += " noise" + (" (negative: not a speed-up)" if c["estimate"] < 0 else "")
    if not c["reliable"]:
        text += f" UNRELIABLE (n={c['n']} < 100)"
    return text


def render(report: dict[str, Any]) -> str:
    """The figures as text: per kind, direct's percentiles, then each arm's added figures with intervals."""
    lines = [
        f"{report['rounds']} rounds x {report['requests_c1']} requests per arm at c=1 "
        f"(n={report['samples_per_arm']} pooled samples per arm per kind), c={report['concurrency']} "
        f"x {report['requests_concurrent']}; max_tokens {report['max_tokens']}; ms; [95 % bootstrap interval]"
    ]
    for kind in KINDS:
        s = report["results"][kind]
        d = s["direct"]
        lines.append(f"\n== {kind} ==")
        lines.append(
            f"direct    E2E p50/p95/p99 {d['p50_ms']:.2f}/{d['p95_ms']:.2f}/{d['p99_ms']:.2f}, c=C {d['rps_c32']:.1f} req/s, "
            f"tokens {d['completion_tokens_median']}"
        )
        if kind == "stream":
            t, i = d["ttft_ms"], d["itl_ms"]
            lines.append(f"{'':9s} TTFT p50/p95 {t['p50']:.2f}/{t['p95']:.2f}, ITL p50/p95 {i['p50']:.3f}/{i['p95']:.3f}")
        for arm, e in s.items():
            if arm in ("direct", "gateway_vs_reference"):
                continue
            ratio = e["e2e_ratio"]
            lines.append(
                f"{arm:9s} E2E added (median of rounds) p50/p95/p99 "
                + "/".join(f"{e['added_latency_ms'][p]:+.2f}" for p in QS)
                + "; ratio "
                + "/".join(f"{ratio[p]:.3f}x" if ratio[p] else "-" for p in QS)
            )
            lines.append(f"{'':9s} E2E added (pooled) " + "; ".join(_interval(p, c) for p, c in e["added_latency_ci_ms"].items()))
            for label, key in (("TTFT", "ttft_added_ci_ms"), ("ITL", "itl_added_ci_ms")):
                if key in e:
                    lines.append(f"{'':9s} {label} added (pooled) " + "; ".join(_interval(p, c) for p, c in e[key].items()))
            within = not over_bound(e, "added_latency_ci_ms", "bound_ms", "")
            if "ttft_added_ci_ms" in e:
                within = within and not over_bound(e, "ttft_added_ci_ms", "ttft_bound_ms", "")
            lines.append(
                f"{'':9s} c=C {e['rps_c32']:.1f} req/s ({e['throughput_ratio_vs_direct_c32']:.3f}x direct); proxy CPU "
                f"{e['cpu_ms_per_request_c32']:.2f} ms/req (c=C), {e['cpu_ms_per_request_c1']:.2f} (c=1); §15.4 "
                f"(upper end of the p50/p95 intervals <= max(20 ms, 5 %)): {'within' if within else 'OVER'}"
            )
        if "gateway_vs_reference" in s:
            gr = s["gateway_vs_reference"]
            cpu = gr["cpu_ratio_c32"]
            lines.append(
                f"gateway/reference: throughput {gr['throughput_ratio_c32']:.2f}x" + (f", CPU {cpu:.2f}x" if cpu else "")
            )
    lines.append(
        "\nnoise: the interval holds 0 (the arms are not told apart; a negative figure is no speed-up). "
        "UNRELIABLE: fewer samples per arm than the percentile needs (p99: 100)."
    )
    return "\n".join(lines)
