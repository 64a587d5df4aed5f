"""Prompt text stays out of the logs (spec §11.2: "日志关闭完整 prompt 输出"): after a ``hitch run`` whose prompt
carries a unique marker, the marker is in no engine log (the lock's ``--log-requests`` is level 0: metadata only,
which the fake engine honours as SGLang 0.5.23's request logger does), not in the daemon's log (which holds the
gateway's), and not in the run's metadata evidence — only where the operator asked for it to be kept: the
harness input kept for ``hitch run rerun`` (0600). Real daemon, real gateway, fake engine process."""

from __future__ import annotations

import secrets
import stat
from pathlib import Path

from tests.harness.daemon.conftest import FAST, as_json, hitch, inputs, leak_guard
from tests.harness.engine.inputs import ServiceInputs

__all__ = ["inputs", "leak_guard"]


def _holding(root: Path, marker: bytes) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and marker in p.read_bytes())


def test_a_runs_prompt_text_is_in_no_engine_or_gateway_log(inputs: ServiceInputs) -> None:
    root = inputs.root
    marker = "prompt-marker-" + secrets.token_hex(8)
    as_json(hitch(root, "daemon", "start", "--json", *FAST))
    argv = ["run", "--harness", "model-call", "--model", "local/tiny", "--device", "cpu", "--engine", "fake",
            "--prompt", f"Please repeat {marker} back.", "--max-output-tokens", "8", "--run-id", "priv-1",
            "--capture", "metadata", "--json"]  # fmt: skip
    out = as_json(hitch(root, *argv))
    assert out["record"]["status"] == "completed"
    logs = sorted(p for p in root.path.rglob("*.log") if p.is_file())
    engine_logs = [p for p in logs if p.name == "engine.log"]
    assert engine_logs, "the engine wrote its log under the root"
    assert any(b"request.finished" in p.read_bytes() for p in engine_logs), "the engine logged its requests"
    assert any(p.name == "daemon.log" for p in logs)
    held = _holding(root.path, marker.encode())
    kept = root.runs / "priv-1" / "harness-input.json"
    assert held == [kept], held  # only what rerun needs, never a log or the metadata evidence
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
