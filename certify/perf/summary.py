"""The overhead figures from the rounds: added percentiles with intervals, the §15.4 decision, the table.

Per kind (unary, stream) and per arm other than direct:

- ``added_latency_ms`` {p50,p95,p99}: per round, arm percentile - direct percentile of E2E; the median over
  rounds (robust to one disturbed round); ``added_latency_ms_rounds`` keeps each round's figure;
- ``added_latency_ci_ms``: the same difference over the samples of every round pooled (``rounds x n_c1``
  per arm, stated as ``n``) with its bootstrap 95 % interval (:func:`harness.stats.added_intervals`); a p99
  from fewer than 100 samples per arm is marked unreliable; an interval that holds 0 marks the difference
  as noise — a negative added figure is never a speed-up by itself;
- streams also: ``ttft_added_ms`` / ``ttft_added_ci_ms`` and ``itl_added_ms`` / ``itl_added_ci_ms``
  (definitions in :mod:`certify.perf.reading`); ``e2e_ratio`` arm / direct per percentile;
- ``over_bound``: the §15.4 decision below, as sentences (empty: within);
- ``rps_c32`` (requests/s at concurrency C: the key keeps its historical name, ``concurrency`` states C),
  ``throughput_ratio_vs_direct_c32``, ``cpu_ms_per_request_c32`` / ``_c1`` (the proxy process).

- ``added_paired_ms`` (E2E; streams also ``itl_added_paired_ms``): the median of the *per-pair* differences
  — each c=1 request of the arm minus the direct request sent right beside it (:mod:`certify.perf.loops`
  alternates them) — with its bootstrap 95 % interval over the pairs. A difference of two medians carries
  the engine's drift between rounds and its spread within one (±15 % on a 2-core CPU engine); a pair shares
  the machine's state of the moment, so the paired median resolves a few ms where the pooled difference
  cannot. It estimates the shift of the typical request (the p50), not a tail;
- ``paired_target``: that shift against the per-token overhead target, max(2 ms, 1 % of direct p50):
  ``met`` (the interval's upper end within it), ``missed`` (its lower end over it) or ``undecided``;
- an arm whose samples carry the engine's share (our gateway, from its evidence: :mod:`certify.perf.loops`)
  also: ``residence_ci_ms`` {p50,p95,p99} — the percentiles of the per-request *residence* (client E2E minus
  the engine's share) with their bootstrap 95 % intervals — and, for streams, ``ttft_residence_ci_ms``.

**The §15.4 pass line is decided on intervals**, for E2E (each kind) and TTFT, p50 and p95, against
max(20 ms, 5 % of the direct figure):

- with a residence (our gateway): the *upper end* of the residence's interval must be within the bound. The
  residence holds everything the client waited for outside the engine's share — the gateway's work *and*
  the client<->gateway hop that a direct request pays too — and it is free of the engine's own variance,
  which on a CPU engine (±100 ms per 16-token request on 2 cores) makes the difference of two E2E
  distributions too wide to decide anything. What it cannot hold: the engine running slower because the
  gateway's work takes CPU from it on a small machine (on the fake engine at 5 ms per token on 2 cores:
  residence p50 1.4 ms, difference p50 4.8 ms), and anything the gateway's own clock misplaced. So the
  black-box difference stands beside it: its *lower end* must not be over the bound (a gateway that costs
  more than the bound, whatever its clock says, fails once the samples tell it apart);
- without one (the bare reference proxy): the *upper end* of the added interval must be within the bound.

Within it, the arm's cost is below the bound with 95 % confidence; a point estimate under the bound with
an interval reaching over it does not pass.

:func:`entry_metrics` turns the gateway arm's figures into the signed entry's overhead metrics
(:class:`~harness.contracts.certification.GatewayAddedLatencyV1`, the decided figure, and
:class:`~harness.contracts.certification.LatencyDifferenceV1`, the black-box difference named as such).
"""

from __future__ import annotations

import statistics
from typing import Any

from certify.perf.loops import KINDS, Plan, Round, pooled
from harness.contracts.certification import (
    GatewayAddedLatencyV1,
    GatewayOverheadV1,
    IntervalV1,
    LatencyDifferenceV1,
    PairedShiftV1,
)
from harness.stats import added_intervals, percentile, ratio_interval

__all__ = [
    "FLOOR_MS",
    "FRACTION",
    "QS",
    "bound_ms",
    "entry_metrics",
    "over_bound",
    "paired_target",
    "render",
    "summarize",
]

FLOOR_MS = 20.0
FRACTION = 0.05
TARGET_FLOOR_MS = 2.0  # the per-token overhead target for the paired p50 shift: max(2 ms, 1 % of direct)
TARGET_FRACTION = 0.01
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


def _residence(rounds: list[Round], kind: str, arm: str, field: str) -> dict[str, dict[str, Any]] | None:
    values = pooled(rounds, kind, arm, field)
    return added_intervals(None, values, QS, scale=1000.0) if values else None


def _paired(rounds: list[Round], kind: str, arm: str, field: str) -> dict[str, Any]:
    diffs = [
        a - d
        for rd in rounds
        for sa, sd in zip(rd.c1[kind][arm], rd.c1[kind]["direct"], strict=True)
        if (a := getattr(sa, field)) is not None and (d := getattr(sd, field)) is not None
    ]
    return added_intervals(None, diffs, {"p50": 0.5}, scale=1000.0)["p50"]


def paired_target(paired: dict[str, Any], direct_p50_ms: float) -> dict[str, Any]:
    """The paired p50 shift against max(2 ms, 1 % of direct p50) (see the module doc)."""
    bound = max(TARGET_FLOOR_MS, TARGET_FRACTION * direct_p50_ms)
    low, high = paired["low"], paired["high"]
    verdict = "undecided" if low is None or high is None else "met" if high <= bound else "missed" if low > bound else "undecided"
    return {"bound_ms": bound, "verdict": verdict}


def _tokens(rounds: list[Round], kind: str, arm: str) -> dict[str, Any]:
    tokens = [s.tokens for rd in rounds for s in rd.c1[kind][arm] if s.tokens is not None]
    return {"completion_tokens": sorted(set(tokens)), "completion_tokens_median": statistics.median(tokens) if tokens else None}


def summarize(rounds: list[Round], plan: Plan, retries: dict[str, int], permits: int | None = None) -> dict[str, Any]:
    kinds = [k for k in KINDS if k in rounds[0].c1]
    arms = list(rounds[0].c1[kinds[0]])
    conc = plan.n_conc > 0  # else no c=C loop ran: its figures are None

    def med(values: Any) -> Any:
        return statistics.median(values) if conc else None

    results: dict[str, Any] = {}
    for kind in kinds:
        direct = _direct(rounds, kind, "e2e")
        di_rps = [rd.rps[kind].get("direct") for rd in rounds]
        section: dict[str, Any] = {
            "direct": {f"{p}_ms": v for p, v in direct.items()} | {"rps_c32": med(di_rps)} | _tokens(rounds, kind, "direct")
        }
        # the engine's own E2E percentiles with their intervals: what a reproduction decides an engine change on
        section["direct"]["e2e_ci_ms"] = added_intervals(None, pooled(rounds, kind, "direct", "e2e"), QS, scale=1000.0)
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
            rps = [rd.rps[kind].get(arm) for rd in rounds]
            entry: dict[str, Any] = {
                "added_latency_ms": added,
                "added_latency_ms_rounds": added_rounds,
                "added_latency_ci_ms": _intervals(rounds, kind, arm, "e2e"),
                "added_paired_ms": _paired(rounds, kind, arm, "e2e"),
                "e2e_ratio": {p: (direct[p] + added[p]) / direct[p] if direct[p] else None for p in QS},
                "bound_ms": {p: bound_ms(direct[p]) for p in _BOUNDED},
                "rps_c32": med(rps),
                "throughput_ratio_vs_direct_c32": med([a / d for a, d in zip(rps, di_rps, strict=True) if a and d]),
                "cpu_ms_per_request_c32": med([rd.cpu_ms_conc[kind].get(arm) for rd in rounds]),
                "cpu_ms_per_request_c1": statistics.median(rd.cpu_ms_c1[kind][arm] for rd in rounds),
            } | _tokens(rounds, kind, arm)
            entry["paired_target"] = paired_target(entry["added_paired_ms"], direct["p50"])
            if (residence := _residence(rounds, kind, arm, "residence")) is not None:
                entry["residence_ci_ms"] = residence
            if kind == "stream":
                d_ttft = section["direct"]["ttft_ms"]
                entry["ttft_added_ms"], entry["ttft_added_ms_rounds"] = _added(rounds, kind, arm, "ttft")
                entry["ttft_added_ci_ms"] = _intervals(rounds, kind, arm, "ttft")
                entry["ttft_bound_ms"] = {p: bound_ms(d_ttft[p]) for p in _BOUNDED}
                if (residence := _residence(rounds, kind, arm, "ttft_residence")) is not None:
                    entry["ttft_residence_ci_ms"] = residence
                entry["itl_added_ms"], _ = _added(rounds, kind, arm, "itl")
                entry["itl_added_ci_ms"] = _intervals(rounds, kind, arm, "itl")
                entry["itl_added_paired_ms"] = _paired(rounds, kind, arm, "itl")
            entry["over_bound"] = over_bound(entry, "e2e", "") + (over_bound(entry, "ttft", "TTFT ") if kind == "stream" else [])
            if kind == "stream" and entry["completion_tokens_median"]:
                events = entry["completion_tokens_median"]  # content events per stream: the per-token relay cost
                entry["cpu_us_per_event_c1"] = entry["cpu_ms_per_request_c1"] * 1000 / events
                ticks = [rd.cpu_ticks_ms_c1[kind][arm] for rd in rounds if arm in rd.cpu_ticks_ms_c1.get(kind, {})]
                entry["cpu_ticks_us_per_event_c1"] = statistics.fmean(ticks) * 1000 / events if ticks else None
                c32 = entry["cpu_ms_per_request_c32"]
                entry["cpu_us_per_event_c32"] = None if c32 is None else c32 * 1000 / events
            section[arm] = entry
        if "reference" in section:
            g, ref = section["gateway"], section["reference"]
            section["gateway_vs_reference"] = {
                "throughput_ratio_c32": med([rd.rps[kind]["gateway"] / rd.rps[kind]["reference"] for rd in rounds])
                if conc
                else None,
                "cpu_ratio_c32": g["cpu_ms_per_request_c32"] / ref["cpu_ms_per_request_c32"]
                if conc and ref["cpu_ms_per_request_c32"]
                else None,
            }
        if "nginx" in section:
            section["gateway_vs_nginx"] = _versus(section["gateway"], section["nginx"], kind, rounds)
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


def _versus(g: dict[str, Any], n: dict[str, Any], kind: str, rounds: list[Round]) -> dict[str, Any]:
    """The gateway beside nginx in the same rounds: CPU ratios (per content event for streams) and whether the
    gateway's paired added E2E p50 is decided above nginx's (its interval wholly above nginx's)."""
    unit = "cpu_us_per_event" if kind == "stream" else "cpu_ms_per_request"

    def ratio(key: str) -> float | None:
        a, b = g.get(key), n.get(key)
        return a / b if a is not None and b else None

    ticks = {"cpu_ticks_ratio_c1": ratio("cpu_ticks_us_per_event_c1")} if kind == "stream" else {}
    # the rounds' CPU, paired (the same rounds, the same events): the ratio of the totals with its interval
    pairs = [(rd.cpu_ms_c1[kind]["gateway"], rd.cpu_ms_c1[kind]["nginx"]) for rd in rounds]
    gp, np_ = g["added_paired_ms"], n["added_paired_ms"]
    decided = None
    if gp["low"] is not None and np_["high"] is not None:
        decided = gp["low"] > np_["high"]
    return {
        "cpu_ratio_c1": ratio(f"{unit}_c1"),
        "cpu_ratio_c32": ratio(f"{unit}_c32"),
        "cpu_unit": unit,
        "cpu_ratio_c1_ci": {k: None if v is None else round(v, 3) if k != "n" else v for k, v in ratio_interval(pairs).items()},
        "added_p50_decided_above_nginx": decided,
    } | ticks


def _record_interval(c: dict[str, Any]) -> dict[str, Any]:
    """An interval of :func:`harness.stats.added_intervals` as the entry keeps it (ms, 3 decimals)."""
    rounded = {k: None if c[k] is None else round(float(c[k]), 3) for k in ("estimate", "low", "high")}
    return IntervalV1(**rounded, n=int(c["n"]), reliable=bool(c["reliable"])).to_json_dict()


def entry_metrics(report: dict[str, Any]) -> dict[str, Any]:
    """The signed entry's overhead metrics from a :func:`summarize` report (its gateway arm):
    ``gateway_added_latency_ms`` (the decided figure: per kind the time in the gateway and the paired shift
    with their intervals, and the §15.4 verdict) and ``gateway_latency_difference_ms`` (the black-box
    percentile difference with its intervals)."""
    decided: dict[str, GatewayOverheadV1] = {}
    difference: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        gw = report["results"][kind]["gateway"]
        paired, target = gw["added_paired_ms"], gw["paired_target"]
        decided[kind] = GatewayOverheadV1(
            residence_ms={p: _record_interval(c) for p, c in gw["residence_ci_ms"].items()},
            paired_shift_ms=PairedShiftV1(
                **_record_interval(paired), target_ms=round(float(target["bound_ms"]), 3), verdict=target["verdict"]
            ),
            bound_ms={p: round(float(v), 3) for p, v in gw["bound_ms"].items()},
            verdict="over" if gw["over_bound"] else "within",
            over=list(gw["over_bound"]),
        )
        difference[kind] = {p: _record_interval(c) for p, c in gw["added_latency_ci_ms"].items()}
    verdict = "over" if any(d.verdict == "over" for d in decided.values()) else "within"
    headline = GatewayAddedLatencyV1(verdict=verdict, unary=decided["unary"], stream=decided["stream"])
    return {
        "gateway_added_latency_ms": headline.to_json_dict(),
        "gateway_latency_difference_ms": LatencyDifferenceV1.model_validate(difference).to_json_dict(),
    }


_KEYS = {
    "e2e": ("added_latency_ci_ms", "residence_ci_ms", "bound_ms"),
    "ttft": ("ttft_added_ci_ms", "ttft_residence_ci_ms", "ttft_bound_ms"),
}


def over_bound(entry: dict[str, Any], figure: str, label: str) -> list[str]:
    """The §15.4 decision for ``figure`` (``e2e`` or ``ttft``) on the intervals (see the module doc): what is
    over, as sentences (empty: within)."""
    added_key, residence_key, bound_key = _KEYS[figure]
    over = []
    for p in _BOUNDED:
        added, bound = entry[added_key][p], entry[bound_key][p]
        residence = entry.get(residence_key)
        if residence is not None:
            r = residence[p]
            if r["high"] is None or r["high"] > bound:
                over.append(
                    f"{label}{p}: time in the gateway {r['estimate']} ms, 95 % interval [{r['low']}, {r['high']}] ms "
                    f"over {bound:.2f} ms (n={r['n']})"
                )
            if added["low"] is None or added["low"] > bound:
                over.append(
                    f"{label}{p}: +{added['estimate']} ms over direct, 95 % interval [{added['low']}, {added['high']}] ms "
                    f"entirely over {bound:.2f} ms (n={added['n']} per arm)"
                )
        elif added["high"] is None or added["high"] > bound:
            over.append(
                f"{label}{p}: +{added['estimate']} ms, 95 % interval [{added['low']}, {added['high']}] ms over "
                f"{bound:.2f} ms (n={added['n']} per arm)"
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


def _cores_text(cores: dict[str, list[int]]) -> str:
    def names(cpus: list[int]) -> str:
        return ",".join(str(c) for c in cpus)

    return f"; engine on cores {names(cores['engine'])}, gateway on {names(cores['gateway'])}, load on {names(cores['load'])}"


def _num(value: float | None, spec: str) -> str:
    """A figure as text, ``-`` where it was not measured (no c=C loop)."""
    return "-" if value is None else format(value, spec)


def render(report: dict[str, Any]) -> str:
    """The figures as text: per kind, direct's percentiles, then each arm's added figures with intervals."""
    lines = [
        f"{report['rounds']} rounds x {report['requests_c1']} requests per arm at c=1 "
        f"(n={report['samples_per_arm']} pooled samples per arm per kind), c={report['concurrency']} "
        f"x {report['requests_concurrent']}; max_tokens {report['max_tokens']}; ms; [95 % bootstrap interval]"
        + (f"; gateway at nice {report['gateway_nice']}" if report.get("gateway_nice") else "")
        + (_cores_text(report["cores"]) if report.get("cores") else "")
    ]
    for kind in [k for k in KINDS if k in report["results"]]:
        s = report["results"][kind]
        d = s["direct"]
        lines.append(f"\n== {kind} ==")
        lines.append(
            f"direct    E2E p50/p95/p99 {d['p50_ms']:.2f}/{d['p95_ms']:.2f}/{d['p99_ms']:.2f}, c=C {_num(d['rps_c32'], '.1f')} "
            f"req/s, tokens {d['completion_tokens_median']}"
        )
        if kind == "stream":
            t, i = d["ttft_ms"], d["itl_ms"]
            lines.append(f"{'':9s} TTFT p50/p95 {t['p50']:.2f}/{t['p95']:.2f}, ITL p50/p95 {i['p50']:.3f}/{i['p95']:.3f}")
        for arm, e in s.items():
            if arm in ("direct", "gateway_vs_reference", "gateway_vs_nginx"):
                continue
            ratio = e["e2e_ratio"]
            lines.append(
                f"{arm:9s} E2E added (median of rounds) p50/p95/p99 "
                + "/".join(f"{e['added_latency_ms'][p]:+.2f}" for p in QS)
                + "; ratio "
                + "/".join(f"{ratio[p]:.3f}x" if ratio[p] else "-" for p in QS)
            )
            lines.append(f"{'':9s} E2E added (pooled) " + "; ".join(_interval(p, c) for p, c in e["added_latency_ci_ms"].items()))
            paired, target = e["added_paired_ms"], e["paired_target"]
            share = f" = {paired['estimate'] / d['p50_ms'] * 100:+.2f} % of direct" if paired["estimate"] is not None else ""
            lines.append(
                f"{'':9s} E2E added (paired, n={paired['n']} pairs) {_interval('p50', paired)}{share}; "
                f"target max(2 ms, 1 %) = {target['bound_ms']:.2f} ms: {target['verdict']}"
            )
            if "itl_added_paired_ms" in e:
                lines.append(f"{'':9s} ITL added (paired) {_interval('p50', e['itl_added_paired_ms'])}")
            for label, key in (("TTFT", "ttft_added_ci_ms"), ("ITL", "itl_added_ci_ms")):
                if key in e:
                    lines.append(f"{'':9s} {label} added (pooled) " + "; ".join(_interval(p, c) for p, c in e[key].items()))
            for label, key in (("E2E", "residence_ci_ms"), ("TTFT", "ttft_residence_ci_ms")):
                if key in e:
                    lines.append(f"{'':9s} {label} in the gateway " + "; ".join(_interval(p, c) for p, c in e[key].items()))
            within = not e["over_bound"]
            lines.append(
                f"{'':9s} c=C {_num(e['rps_c32'], '.1f')} req/s ({_num(e['throughput_ratio_vs_direct_c32'], '.3f')}x "
                f"direct); proxy CPU {_num(e['cpu_ms_per_request_c32'], '.2f')} ms/req (c=C), {e['cpu_ms_per_request_c1']:.2f} "
                "(c=1); §15.4 "
                f"(p50/p95 <= max(20 ms, 5 %), decided on the intervals): {'within' if within else 'OVER'}"
            )
            if "cpu_us_per_event_c1" in e:
                lines.append(
                    f"{'':9s} CPU per content event {e['cpu_us_per_event_c1']:.1f} us (c=1), "
                    f"{_num(e['cpu_us_per_event_c32'], '.1f')} us (c=C); as utime+stime ticks (mean of rounds, c=1) "
                    f"{_num(e.get('cpu_ticks_us_per_event_c1'), '.1f')} us"
                )
        if "gateway_vs_nginx" in s:
            gn = s["gateway_vs_nginx"]
            per = "per event" if gn["cpu_unit"] == "cpu_us_per_event" else "per request"
            c1, cc = gn["cpu_ratio_c1"], gn["cpu_ratio_c32"]
            decided = {True: "decided above nginx's", False: "not decided above nginx's", None: "-"}
            ci = gn["cpu_ratio_c1_ci"]
            ci_text = f" [{ci['low']:.2f}, {ci['high']:.2f}] over the rounds' totals" if ci["low"] is not None else ""
            lines.append(
                f"gateway/nginx: CPU {per} {_num(c1, '.2f')}x (c=1){ci_text}, {_num(cc, '.2f')}x (c=C) (target <= 1.50x); "
                f"added E2E p50 (paired): {decided[gn['added_p50_decided_above_nginx']]}"
                + (f"; as utime+stime ticks {_num(gn['cpu_ticks_ratio_c1'], '.2f')}x (c=1)" if "cpu_ticks_ratio_c1" in gn else "")
            )
        if "gateway_vs_reference" in s:
            gr = s["gateway_vs_reference"]
            cpu = gr["cpu_ratio_c32"]
            lines.append(
                f"gateway/reference: throughput {_num(gr['throughput_ratio_c32'], '.2f')}x" + (f", CPU {cpu:.2f}x" if cpu else "")
            )
    lines.append(
        "\nnoise: the interval holds 0 (the arms are not told apart; a negative figure is no speed-up). "
        "UNRELIABLE: fewer samples per arm than the percentile needs (p99: 100)."
    )
    return "\n".join(lines)
