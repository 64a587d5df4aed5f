"""Test support for the gateway: the kit's fake engine and gateway rig, locks, evidence rows, secret scans."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

from fixtures.fake_sglang.client import FakeEngineProcess, start_fake_engine
from gateway.bindings import UpstreamTarget
from gateway.testing import GatewayThread
from harness.contracts.lock import InferenceLockV1
from harness.lock import build_lock
from tests.harness.lock_inputs import model_manifest, runtime_manifest

REPO = Path(__file__).resolve().parents[2]
__all__ = ["Engine", "GatewayThread", "evidence_rows", "make_lock", "secret_hits", "start_engine", "target_for", "token_of"]


def make_lock(
    *,
    max_running: int = 1,
    context: int = 4096,
    max_output: int | None = None,
    top_k: int = 0,
    max_queued: int | None = None,
    benchmark: bool = False,
    stream_idle_ms: int | None = None,
    abort_confirm_ms: int | None = None,
) -> InferenceLockV1:
    lock = build_lock(
        model_manifest(),
        runtime_manifest(),
        device="cpu",
        profile="baseline",
        cpu_cores_per_node=2,
        context_tokens=context,
        benchmark=benchmark,
    )
    extra: dict[str, int] = {"max_queued_requests": max_queued} if max_queued is not None else {}
    if stream_idle_ms is not None:
        extra["stream_idle_timeout_ms"] = stream_idle_ms
    if abort_confirm_ms is not None:
        extra["abort_confirm_timeout_ms"] = abort_confirm_ms
    ex = lock.execution.model_copy(update={"max_running_requests": max_running, "queue_timeout_ms": 30_000, **extra})
    gen = lock.generation.model_copy(update={"top_k": top_k, **({"max_output_tokens": max_output} if max_output else {})})
    return lock.model_copy(update={"execution": ex, "generation": gen})


Engine = FakeEngineProcess  # the fake engine process these tests drive (fixtures.fake_sglang.client)


def start_engine(
    model_dir: Path, workdir: Path, *extra: str, served: str = "tiny-wire", max_running: int | None = None
) -> Engine:
    return start_fake_engine(model_dir, workdir, *extra, served=served, max_running=max_running)


def target_for(engine: Engine, lock: InferenceLockV1, *, service_id: str = "svc-test", epoch: int = 1) -> UpstreamTarget:
    return UpstreamTarget(
        base_url=engine.base,
        engine_key=engine.key,
        service_id=service_id,
        inference_id=lock.inference_id,
        epoch=epoch,
        lock=lock,
        wire_model=engine.served,
        tokenizer_dir=engine.model_dir,
    )


def token_of(record: Any) -> str:
    return Path(record.token_ref).read_text(encoding="utf-8").strip()


def evidence_rows(gt: GatewayThread, binding_id: str) -> list[dict[str, Any]]:
    import json

    from harness.contracts.events import RequestEvidenceV1

    gt.settle_evidence()  # a client may hold a reply's last byte before the handler records it
    path = gt.gw.evidence.path_for(binding_id)
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for row in rows:
        RequestEvidenceV1.model_validate(row)  # every row is a valid record
    return rows


def secret_hits(root: Path, secrets_: list[str]) -> list[str]:
    """Files under ``root`` holding any secret, except 0600 files under a ``private`` directory."""
    hits: list[str] = []
    needles = [s.encode() for s in secrets_ if s]
    for path in root.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        if "private" in path.parts and mode == 0o600:
            continue
        data = path.read_bytes()
        if any(n in data for n in needles):
            hits.append(str(path.relative_to(root)))
    return hits
