"""Report inputs for the tests: a DESIGN §6 predicate, a certify.perf JSON, locust CSVs, signed entries."""

from __future__ import annotations

import base64
import csv
import json
from pathlib import Path
from typing import Any

from catalog.signing import (
    build_statement,
    generate_key,
    public_keys_dir_for,
    sign_envelope,
    subjects_from_predicate,
    write_entry,
)
from harness.ids import sha256_hex

XSS = "<script>alert('x')</script>"
PERCENTILE_COLUMNS = ["50%", "66%", "75%", "80%", "90%", "95%", "98%", "99%", "99.9%", "99.99%", "100%"]


def digest(label: str) -> str:
    return "sha256:" + sha256_hex(label.encode())


def predicate(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "level": "contract",
        "reasons": ["fake engine: proves the harness only"],
        "suite_version": "1",
        "project_commit": "0123456789abcdef0123456789abcdef01234567",
        "device": "cpu",
        "engine": "fake",
        "runtime_id": digest("runtime"),
        "runtime_name": "sglang-0.5.23-cpu-generic",
        "model_id": digest("model"),
        "inference_id": digest("lock"),
        "profile": "baseline",
        "finished_at": "2026-11-30T10:00:00Z",
        "hardware": {"cpu": {"model": "Test CPU", "cores": 2, "amx": False}, "gpu": None},
        "checks": [
            {"id": "hardware.cpu.no_gpu", "status": "passed", "required": True, "duration_s": 0.12, "details": {}},
            {"id": "protocol.chat.stream", "status": "passed", "required": True, "duration_s": 0.5, "details": {"chunks": 4}},
            {"id": "faults.engine.oom", "status": "failed", "required": True, "duration_s": 1.25, "details": {"note": XSS}},
            {"id": "perf.overhead", "status": "skipped", "required": False, "duration_s": 0.0, "details": {}},
        ],
        "metrics": {
            **overhead_metrics(),
            "ttft_added_ms": {"p50": 0.5, "p95": 1.0},
            "throughput_ratio_c32": 0.93,
            "cancel_slot_free_ms": 120.0,
            "idle_stop_after_ttl_s": 3.5,
        },
        "evidence": {
            "hardware.server_info.device/engine.log": digest("engine.log"),
            "protocol.chat.stream/requests.jsonl": digest("requests"),
        },
    }
    from harness.contracts.certification import CertificationResultV1

    return CertificationResultV1.model_validate({**base, **overrides}).to_json_dict()  # as the plugin writes it


def interval(estimate: float, spread: float = 0.05, n: int = 300) -> dict[str, Any]:
    """An IntervalV1 around ``estimate`` (± ``spread`` of it, at least ± 0.001)."""
    half = max(abs(estimate) * spread, 0.001)
    return {"estimate": estimate, "low": round(estimate - half, 3), "high": round(estimate + half, 3), "n": n, "reliable": True}


def overhead_metrics(
    residence_p95: float = 1.2, *, verdict: str = "within", paired: str = "met", difference_p50: float = 33.9
) -> dict[str, Any]:
    """A schema-3 entry's overhead metrics: the decided figure (time in the gateway, paired shift, verdict) and
    the black-box difference, whose interval spans the engine's variance (± 190 ms around ``difference_p50``)."""

    def kind() -> dict[str, Any]:
        return {
            "residence_ms": {p: interval(residence_p95 * f) for p, f in (("p50", 0.5), ("p95", 1.0), ("p99", 1.5))},
            "paired_shift_ms": {**interval(0.8, 0.5, 90), "target_ms": 2.0, "verdict": paired},
            "bound_ms": {"p50": 20.0, "p95": 20.0},
            "verdict": verdict,
            "over": [] if verdict == "within" else ["p95: time in the gateway 30 ms, 95 % interval [28, 32] ms over 20.00 ms"],
        }

    wide = {p: {**interval(difference_p50 * f), "low": difference_p50 * f - 190, "high": difference_p50 * f + 190}
            for p, f in (("p50", 1.0), ("p95", -0.5), ("p99", -2.0))}  # fmt: skip
    return {
        "gateway_added_latency_ms": {"verdict": verdict, "unary": kind(), "stream": kind()},
        "gateway_latency_difference_ms": {"unary": wide, "stream": wide},
    }


def overhead() -> dict[str, Any]:
    """The shape ``python -m certify.perf --out`` writes."""

    def arm(p50: float, rps: float, stream: bool) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "added_latency_ms": {"p50": p50, "p95": p50 * 2, "p99": p50 * 3},
            "rps_c32": rps,
            "throughput_ratio_vs_direct_c32": rps / 1000.0,
            "cpu_ms_per_request_c32": 0.3,
            "cpu_ms_per_request_c1": 0.4,
        }
        if stream:
            entry["ttft_added_ms"] = {"p50": p50, "p95": p50 * 2, "p99": p50 * 3}
        return entry

    results: dict[str, Any] = {}
    for kind in ("unary", "stream"):
        s = kind == "stream"
        results[kind] = {
            "gateway": arm(0.6, 900.0, s),
            "reference": arm(0.3, 950.0, s),
            "direct": {"p50_ms": 4.0, "rps_c32": 1000.0},
            "gateway_vs_reference": {"throughput_ratio_c32": 0.95, "cpu_ratio_c32": 1.2},
        }
    results["gateway_rss_bytes_per_open_stream"] = 20480.0
    return {"schema_version": "1", "kind": "gateway-overhead", "engine": "fake", "rounds": 5, "results": results}


def results() -> dict[str, Any]:
    return {**predicate(), "overhead": overhead(), "lifecycle": {"cold_start_s": 2.5, "reuse_s": 0.05, "stop": {"drain_s": 0.3}}}


def _stats_row(type_: str, name: str, count: int, fails: int, rps: float, p50: float) -> list[Any]:
    pct = [p50, p50 * 1.1, p50 * 1.2, p50 * 1.3, p50 * 1.5, p50 * 2, p50 * 2.5, p50 * 3, p50 * 3, p50 * 3, p50 * 4]
    return [type_, name, count, fails, p50, p50 * 1.2, p50 / 2, p50 * 4, 120, rps, fails / 10, *[int(p) for p in pct]]


def write_locust_dir(path: Path, *, targets: tuple[str, ...] = ("gateway", "direct")) -> Path:
    """Locust ``--csv`` files for each target, with a TTFT custom-metric row and a short history."""
    path.mkdir(parents=True, exist_ok=True)
    header = ["Type", "Name", "Request Count", "Failure Count", "Median Response Time", "Average Response Time",
              "Min Response Time", "Max Response Time", "Average Content Size", "Requests/s", "Failures/s",
              *PERCENTILE_COLUMNS]  # fmt: skip
    hist_header = ["Timestamp", "User Count", "Type", "Name", "Requests/s", "Failures/s", *PERCENTILE_COLUMNS,
                   "Total Request Count", "Total Failure Count", "Total Median Response Time",
                   "Total Average Response Time", "Total Min Response Time", "Total Max Response Time",
                   "Total Average Content Size"]  # fmt: skip
    for i, target in enumerate(targets):
        p50 = 40.0 + 2 * (target == "gateway")
        with (path / f"{target}_stats.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(header)
            w.writerow(_stats_row("POST", "/v1/chat/completions", 1000 - i, 3 * (target == "gateway"), 33.3 - i, p50))
            w.writerow(_stats_row("SSE", "ttft", 1000 - i, 0, 33.3 - i, p50 / 4))
            w.writerow(_stats_row("", "Aggregated", 2000 - 2 * i, 3, 66.6, p50 / 2))
        with (path / f"{target}_stats_history.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(hist_header)
            w.writerow([1_700_000_000, 0, "", "Aggregated", "0.000000", "0.000000", *["N/A"] * 11, 0, 0, 0, 0, 0, 0, 0])
            for t in range(1, 6):
                users = min(t * 8, 32)
                w.writerow([1_700_000_000 + t, users, "", "Aggregated", f"{10.0 * t:2f}", "0.000000",
                            *[int(p50 * (1 + k / 10)) for k in range(11)], 100 * t, 0, p50, p50, 1, p50 * 4, 120])  # fmt: skip
    (path / "summary.json").write_text(json.dumps({"users": 32, "spawn_rate": 8, "run_time_s": 5, "note": XSS}))
    return path


def signing_key(tmp: Path, name: str = "trusted") -> tuple[Path, Path]:
    """(private key path, public keys dir) of a fresh Ed25519 key."""
    pair = generate_key(tmp / name / "key.pem")
    return pair.private_key, public_keys_dir_for(pair.private_key)


def sign_entry(entries: Path, private_key: Path, pred: dict[str, Any]) -> Path:
    statement = build_statement(pred, subjects_from_predicate(pred))
    return write_entry(sign_envelope(statement, private_key), entries)


def tamper_level(path: Path, level: str = "certified") -> Path:
    """Edit the signed payload's level in place, keeping the old signature."""
    envelope = json.loads(path.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["level"] = level
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    path.write_text(json.dumps(envelope))
    return path


def build_all(tmp: Path) -> dict[str, Path]:
    """All three pages in ``tmp/out``: a matrix with one good and one tampered entry, a run page, a load page."""
    from reports.builder import build_load_page, build_matrix, build_run_page

    private, keys = signing_key(tmp)
    entries = tmp / "entries"
    sign_entry(entries, private, predicate())
    tamper_level(sign_entry(entries, private, predicate(profile="latency")))
    out = tmp / "out"
    return {
        "matrix": build_matrix(entries, keys, out),
        "run": build_run_page(results(), out),
        "load": build_load_page(write_locust_dir(tmp / "load"), out),
    }


TIMELINE_T0 = 1_700_000_000.0
TIMELINE_PIDS = {"gw0": 100, "gw1": 101, "main": 1}


def timeline_span(kind: str, name: str, a: float, b: float, worker: str, **kw: Any) -> dict[str, Any]:
    return {
        "kind": kind, "name": name, "phase": kw.pop("phase", "call"), "worker": worker, "pid": TIMELINE_PIDS[worker],
        "start": TIMELINE_T0 + a, "end": TIMELINE_T0 + b, "duration_s": b - a, **kw,
    }  # fmt: skip


def timeline(spans: list[dict[str, Any]] | None = None, wall: float = 140.0, cpu: dict[str, Any] | None = None) -> dict[str, Any]:
    """A session's ``timeline`` as results.json holds it (default: :func:`timeline_spans`)."""
    rows = timeline_spans() if spans is None else spans
    return {"started_at": TIMELINE_T0, "ended_at": TIMELINE_T0 + wall, "wall_s": wall, "spans": rows, "cpu": cpu}


def timeline_spans() -> list[dict[str, Any]]:
    """gw0 starts the session engine (a step inside its certify_env setup); gw1 joins it, waits for gw0's
    exclusive check (its engine turn), then runs the longest check; the controller scans for secrets."""
    span = timeline_span
    return [
        span("fixture", "certify_env", 2, 60, "gw0", phase="setup", check="hardware.a", scope="session", engine="session"),
        span("step", "session engine start", 5, 58, "gw0", phase="setup", check="hardware.a", engine="session"),
        span("fixture", "certify_env", 3, 59, "gw1", phase="setup", check="protocol.b", scope="session", engine="session"),
        span("check", "hardware.a", 60, 70, "gw0", engine="session"),
        span("wait", "_shared_engine_turn", 59, 70.5, "gw1", phase="setup", check="protocol.b", scope="function"),
        span("check", "protocol.b", 70.5, 130, "gw1", engine="session"),
        span("fixture", "private_daemon", 70.2, 90, "gw0", phase="setup", check="faults.c", scope="session", engine="private"),
        span("check", "faults.c", 90.1, 110, "gw0", engine="private"),
        span("check", "security.secrets.scan", 131, 132, "main", phase="session_end", engine="none"),
    ]  # fmt: skip
