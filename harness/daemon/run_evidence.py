"""The daemon's part of a run's evidence under ``runs/<run-id>/inference/``.

Owns :class:`EngineFacts` (the allow-listed observations of the engine's ``/server_info``, and its ``/metrics`` text,
read with the engine key the daemon holds) and :func:`write_execution_evidence`: the sealed lock, model and
runtime manifests, the run's attempt rows copied from the gateway (``attempts.jsonl``) with their digest,
the serving metrics at run start and end, the engine's own figures of each attempt joined by request id
(:mod:`harness.daemon.engine_requests`), the capture index, and ``execution.json`` whose request count and
token totals come from those rows and whose ``complete`` comes from three checks (every attempt recorded,
capture not truncated or failed, no writer error); then it seals the set (``inference.ref.json``,
:mod:`harness.run_ref`). ``execution.json`` also holds the serving epoch's readiness (cold start and warm-up when the
run started the engine, the tool-call probe) and the engine's RSS series while the run was live
(:mod:`harness.contracts.run_readiness`). The harness's own files (``harness.json``, ``result.json``) are the CLI's.

The run's :class:`ModelIdentityV1` is built here from the lock and the binding (:func:`model_identity`), with
``identity_resolved`` only when the daemon saw the service pass readiness: nothing an engine or a caller says
about the model enters it.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gateway.evidence import RowTally
from harness.contracts.binding import ModelEndpointBindingV1
from harness.contracts.evidence import (
    AttemptLedgerV1,
    EvidenceCheckV1,
    InferenceExecutionEvidenceV1,
    ModelIdentityV1,
    ServingMetricsV1,
)
from harness.contracts.lock import InferenceLockV1
from harness.contracts.run import RunRecordV1
from harness.contracts.run_readiness import EngineMemorySeriesV1, RunReadinessV1, ToolCallProbeV1
from harness.contracts.run_ref import CaptureFileV1
from harness.daemon.engine_join import EngineJoin
from harness.daemon.engine_requests import write_engine_requests
from harness.engine.readiness import ReadinessReport
from harness.engine.redaction import observations, redact
from harness.engine.sglang import ENGINE_LOG
from harness.ids import digest_json
from harness.paths import HitchRoot, atomic_write_bytes, atomic_write_json, ensure_private_dir
from harness.run_ref import seal_ref, write_capture_index
from harness.runtimes import get_runtime
from harness.store import read_manifest

__all__ = [
    "EngineFacts",
    "attempt_ledger",
    "place_rows",
    "tally_rows_file",
    "GatewayFacts",
    "facts_after_death",
    "model_identity",
    "redact",
    "run_readiness",
    "scrape_engine",
    "write_execution_evidence",
    "write_start_facts",
]

_SCRAPE_TIMEOUT_S = 10.0


@dataclass
class EngineFacts:
    """What the engine said about itself around a run (kept in memory until the evidence is written)."""

    server_info: dict[str, Any] | None = None
    server_info_at: float | None = None
    metrics_start: tuple[float, str] | None = None
    metrics_end: tuple[float, str] | None = None
    errors: list[str] = field(default_factory=list)
    readiness: RunReadinessV1 | None = None  # the serving epoch's readiness as the run was bound
    memory: EngineMemorySeriesV1 | None = None  # the engine's RSS while the run was live (set when it ends)


async def scrape_engine(
    base_url: str, engine_key: str, *, server_info: bool, secrets: tuple[str, ...] = ()
) -> tuple[dict[str, Any] | None, str | None, list[str]]:
    """``/server_info`` (redacted; only when asked) and ``/metrics`` of the engine; failures are named, not raised."""
    errors: list[str] = []
    info: dict[str, Any] | None = None
    metrics: str | None = None
    headers = {"Authorization": f"Bearer {engine_key}"}
    async with httpx.AsyncClient(base_url=base_url, timeout=_SCRAPE_TIMEOUT_S, trust_env=False) as client:
        if server_info:
            try:
                resp = await client.get("/server_info", headers=headers)
                if resp.status_code == 200 and isinstance(resp.json(), dict):
                    info = observations(resp.json(), (engine_key, *secrets))  # an allow-list, never minus a deny-list
                else:
                    errors.append(f"/server_info answered HTTP {resp.status_code}")
            except (httpx.HTTPError, ValueError) as exc:
                errors.append(f"/server_info: {type(exc).__name__}")
        try:
            resp = await client.get("/metrics", headers=headers)
            if resp.status_code == 200:
                metrics = resp.text
            else:
                errors.append(f"/metrics answered HTTP {resp.status_code}")
        except httpx.HTTPError as exc:
            errors.append(f"/metrics: {type(exc).__name__}")
    return info, metrics, errors


@dataclass(frozen=True)
class GatewayFacts:
    """What the gateway knows of one binding once its evidence is settled."""

    rows_file: Path
    begun: int
    capture_state: str  # complete | partial | failed
    writer_failed: bool
    daemon_died: bool = False  # the rows are what reached disk before the daemon that held the run died
    tally: RowTally | None = None  # the rows file as the gateway wrote it (None: count it from the file)
    capture_files: list[tuple[str, int, str]] | None = None  # a full capture's segment files (None: walk the folder)
    join: EngineJoin | None = None  # the run's live join to the engine's lines (None: one pass over the files)


def place_rows(src: Path, dst: Path) -> None:
    """The gateway's rows file becomes the run's ``attempts.jsonl``: a hard link (O(1); the gateway writes no more
    rows for a settled binding), else a streamed copy; a second pass with the source gone keeps what is there."""
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except FileNotFoundError:
        if not dst.exists():
            atomic_write_bytes(dst, b"", mode=0o600)
        return
    except OSError:  # another filesystem, or links refused
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o600)
    os.replace(tmp, dst)


def tally_rows_file(path: Path) -> RowTally:
    """A rows file counted line by line (a daemon that died, a failed write): O(1) memory."""
    tally = RowTally()
    with path.open("rb") as lines:
        for line in lines:
            try:
                row = json.loads(line) if line.strip() else None
            except ValueError:
                row = None  # a torn last line: hashed, not counted (the writer's verdict covers it)
            tally.add(line, [row] if isinstance(row, dict) else [])
    return tally


def attempt_ledger(tally: RowTally, begun: int) -> AttemptLedgerV1:
    """The run's attempt ledger from its rows' tally: totals, the counts unavailable, output tokens per second."""
    seconds = tally.timed_seconds
    per_s = round(tally.timed_output_tokens / seconds, 3) if seconds > 0 else None
    return AttemptLedgerV1(
        file="attempts.jsonl",
        digest=tally.digest,
        rows=tally.rows,
        begun=begun,
        by_status=dict(tally.by_status),
        input_tokens=tally.tokens["input_tokens"],
        cached_tokens=tally.tokens["cached_tokens"],
        output_tokens=tally.tokens["output_tokens"],
        reasoning_tokens=tally.tokens["reasoning_tokens"],
        unavailable=dict(tally.unavailable),
        output_tokens_per_s=per_s,
    )


def _attempts_detail(ledger: AttemptLedgerV1, gateway: GatewayFacts) -> str:
    if gateway.daemon_died:
        return f"{ledger.rows} rows reached disk; the daemon died with the run live, so attempts then in flight are unknown"
    return f"{ledger.rows} rows for {ledger.begun} attempts begun"


def model_identity(lock: InferenceLockV1, requested: str | None, wire_model: str, *, resolved: bool) -> ModelIdentityV1:
    """Spec §6.3's identity of a run's model: from the lock (never from what the engine answers)."""
    return ModelIdentityV1(
        requested_id=requested or f"local/{lock.model_id}",
        effective_id=lock.model_id,
        parameters_sha256=digest_json(lock.generation.to_json_dict()),
        inference_id=lock.inference_id,
        identity_resolved=resolved,
        wire_model=wire_model,
    )


def _ms(seconds: float | None) -> float | None:
    return round(seconds * 1000, 3) if seconds is not None else None


def _s(seconds: float | None) -> float | None:
    return round(seconds, 3) if seconds is not None else None


def run_readiness(
    service_id: str,
    epoch: int,
    report: ReadinessReport,
    ready_s: float | None,
    *,
    started_by_run: bool,
    tool_call_required: bool,
    tool_call: ToolCallProbeV1 | None,
) -> RunReadinessV1:
    """The serving epoch's readiness as a run's evidence keeps it: its cold start (``ready_s``: the engine's launch
    until ready) and warm-up (the readiness generations, from ``/server_info`` matched to the SSE answer read) only
    when this run started the engine."""
    warmup = None
    if started_by_run and report.server_info_s is not None and report.stream_s is not None:
        warmup = max(0.0, report.stream_s - report.server_info_s)
    return RunReadinessV1(
        service_id=service_id,
        epoch=epoch,
        started_by_run=started_by_run,
        steps=list(report.steps),
        health_s=_s(report.health_s),
        server_info_s=_s(report.server_info_s),
        responses_s=_s(report.responses_s),
        stream_s=_s(report.stream_s),
        flushed_s=_s(report.flushed_s),
        idle_wait_s=_s(report.idle_wait_s),
        busy_polls=report.busy_polls,
        flush_attempts=report.flush_attempts,
        engine_version=report.engine_version,
        probe_output_tokens=report.probe_output_tokens,
        cold_start_ms=_ms(ready_s) if started_by_run else None,
        warmup_ms=_ms(warmup),
        tool_call_required=tool_call_required,
        tool_call=tool_call,
    )


def write_start_facts(
    root: HitchRoot, run_id: str, binding: ModelEndpointBindingV1, engine: EngineFacts, identity: ModelIdentityV1
) -> None:
    """At bind time: the binding, the engine's facts and the resolved identity are on disk even if the daemon dies
    with the run."""
    out = ensure_private_dir(root.run_inference_dir(run_id))
    atomic_write_json(out / "binding.json", binding.to_json_dict())
    atomic_write_json(out / "server-info.json", {"server_info": engine.server_info, "at": engine.server_info_at})
    atomic_write_json(out / "identity.json", identity.to_json_dict())


def facts_after_death(root: HitchRoot, run_id: str) -> tuple[ModelEndpointBindingV1, EngineFacts, ModelIdentityV1 | None] | None:
    """What :func:`write_start_facts` kept of a run whose daemon died (None when it never bound)."""
    out = root.run_inference_dir(run_id)
    try:
        binding = ModelEndpointBindingV1.model_validate_json((out / "binding.json").read_text(encoding="utf-8"))
        info = json.loads((out / "server-info.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    try:
        identity: ModelIdentityV1 | None = ModelIdentityV1.model_validate_json((out / "identity.json").read_bytes())
    except (OSError, ValueError):
        identity = None  # bound by a daemon that did not write it
    engine = EngineFacts(server_info=info.get("server_info"), server_info_at=info.get("at"))
    engine.errors.append("the daemon died with the run live: no metrics were scraped")
    return binding, engine, identity


def _capture_entries(binding_id: str, files: list[tuple[str, int, str]] | None) -> list[CaptureFileV1] | None:
    """The capture index's entries from the gateway's own account of its segment files (paths under capture/)."""
    if files is None:
        return None
    return [CaptureFileV1(path=f"{binding_id}/{name}", size=size, digest=digest) for name, size, digest in files]


def _check(name: str, ok: bool, detail: str) -> EvidenceCheckV1:
    return EvidenceCheckV1(name=name, ok=ok, code=None if ok else "inference_capture_incomplete", detail=detail)


def _metrics(out: Path, engine: EngineFacts) -> ServingMetricsV1:
    files: dict[str, str | None] = {"start": None, "end": None}
    for label, sample in (("start", engine.metrics_start), ("end", engine.metrics_end)):
        if sample is not None:
            name = f"engine-metrics.{label}.prom"
            atomic_write_bytes(out / name, sample[1].encode(), mode=0o600)
            files[label] = name
    return ServingMetricsV1(
        start_at=engine.metrics_start[0] if engine.metrics_start else None,
        end_at=engine.metrics_end[0] if engine.metrics_end else None,
        start_file=files["start"],
        end_file=files["end"],
        errors=list(engine.errors),
    )


def write_execution_evidence(
    root: HitchRoot,
    record: RunRecordV1,
    lock: InferenceLockV1,
    binding: ModelEndpointBindingV1,
    gateway: GatewayFacts,
    engine: EngineFacts,
    hardware: dict[str, Any],
    reused_service: bool,
    identity: ModelIdentityV1 | None,
) -> tuple[InferenceExecutionEvidenceV1, str]:
    """Write the daemon's evidence files of a terminal run and seal them; returns the execution record written
    and the digest of the run's ``inference.ref.json``."""
    out = ensure_private_dir(root.run_inference_dir(record.run_id))
    atomic_write_json(out / "lock.json", lock.to_json_dict())
    atomic_write_json(out / "model.json", read_manifest(root, lock.model_id).to_json_dict())
    atomic_write_json(out / "runtime.json", get_runtime(lock.runtime_id).to_json_dict())
    attempts = out / "attempts.jsonl"
    place_rows(gateway.rows_file, attempts)
    known = gateway.tally is not None and not gateway.writer_failed and gateway.tally.size == attempts.stat().st_size
    tally = gateway.tally if known and gateway.tally is not None else tally_rows_file(attempts)
    ledger = attempt_ledger(tally, gateway.begun)
    if gateway.join is not None:  # joined while the run lived: only the last seconds are read here
        engine_requests = gateway.join.finish(rows_file=attempts)
    else:
        engine_requests = write_engine_requests(out, attempts, root.service_dir(binding.service_id) / ENGINE_LOG)
    checks = [
        _check("attempts_recorded", ledger.rows == ledger.begun and not gateway.daemon_died, _attempts_detail(ledger, gateway)),
        _check("capture_complete", gateway.capture_state == "complete", f"capture {record.capture}: {gateway.capture_state}"),
        _check("no_writer_error", not gateway.writer_failed, "a row write failed" if gateway.writer_failed else "none"),
    ]
    complete = all(c.ok for c in checks)
    assert record.finished_at is not None and record.status != "admitted"
    execution = InferenceExecutionEvidenceV1(
        run_id=record.run_id,
        status=record.status,
        error_code=record.error.code if record.error else None,
        inference_id=lock.inference_id,
        lock_digest=digest_json(lock.to_json_dict()),
        model_id=lock.model_id,
        runtime_id=lock.runtime_id,
        service_id=binding.service_id,
        epoch=binding.epoch,
        hardware=hardware,
        observed={"server_info": engine.server_info, "server_info_at": engine.server_info_at},
        binding=binding,
        reused_service=reused_service,
        cache_condition="warm" if reused_service else "cold",
        capture=record.capture,
        attempts=ledger,
        serving_metrics=_metrics(out, engine),
        requests=ledger.rows,
        checks=checks,
        complete=complete,
        incomplete_code=None if complete else "inference_capture_incomplete",
        model_identity=identity,
        engine_requests=engine_requests,
        readiness=engine.readiness,
        engine_memory=engine.memory,
    )
    atomic_write_json(out / "execution.json", execution.to_json_dict())
    write_capture_index(out.parent, record.capture, _capture_entries(binding.binding_id, gateway.capture_files))
    _, ref_digest = seal_ref(out.parent, record.run_id, lock, {"attempts": (tally.digest, tally.size)})
    return execution, ref_digest
