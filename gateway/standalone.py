"""Run one gateway as its own process from a spec file (benchmarks, tests, manual runs).

Owns ``python -m gateway --spec FILE``. The spec is JSON::

    {"state_dir": DIR, "host": "127.0.0.1", "port": 0, "metrics_port": 0, "capture": "off",
     "targets": [{"base_url": "http://127.0.0.1:P", "engine_key_file": F, "service_id": S, "epoch": 1,
                  "lock_file": F, "wire_model": M, "tokenizer_dir": D}],
     "runs": [{"run_id": R, "target": 0}],
     "ready_file": F}

Secrets travel only in files: the engine key is read from ``engine_key_file``; each run's token is in the
0600 file its binding record names. Once listening, the process writes ``ready_file`` (atomically) with
the gateway URL, the metrics URL and the binding records, then serves until SIGTERM/SIGINT. The daemon
hosts the gateway in-process instead; this entry point is for measuring it on its own.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import uvloop

from gateway.bindings import UpstreamTarget
from gateway.server import Gateway, GatewayConfig
from harness.contracts.lock import InferenceLockV1
from harness.paths import atomic_write_json
from harness.signals import stop_requested

__all__ = ["main", "serve_spec"]


def _target(spec: dict[str, Any]) -> UpstreamTarget:
    lock = InferenceLockV1.model_validate_json(Path(spec["lock_file"]).read_text(encoding="utf-8"))
    return UpstreamTarget(
        base_url=spec["base_url"],
        engine_key=Path(spec["engine_key_file"]).read_text(encoding="utf-8").strip(),
        service_id=spec["service_id"],
        inference_id=lock.inference_id,
        epoch=int(spec.get("epoch", 1)),
        lock=lock,
        wire_model=spec["wire_model"],
        tokenizer_dir=Path(spec["tokenizer_dir"]),
    )


async def serve_spec(spec: dict[str, Any]) -> None:
    config = GatewayConfig(
        state_dir=Path(spec["state_dir"]),
        host=spec.get("host", "127.0.0.1"),
        port=int(spec.get("port", 0)),
        metrics_port=spec.get("metrics_port", 0),
        capture=spec.get("capture", "off"),
    )
    gateway = Gateway(config)
    await gateway.start()
    targets = [_target(t) for t in spec["targets"]]
    records = [gateway.register(run["run_id"], targets[int(run.get("target", 0))]) for run in spec.get("runs", [])]
    atomic_write_json(
        Path(spec["ready_file"]),
        {"base_url": gateway.base_url, "metrics_url": gateway.metrics_url, "bindings": [r.to_json_dict() for r in records]},
    )
    stop = stop_requested()
    await stop.wait()
    for record in records:
        gateway.revoke(record.binding_id)
    await gateway.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway", description="run one gateway from a spec file")
    parser.add_argument("--spec", required=True, type=Path)
    args = parser.parse_args(argv)
    spec = json.loads(args.spec.read_text(encoding="utf-8"))
    uvloop.run(serve_spec(spec))
    return 0
