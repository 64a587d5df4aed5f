"""NVIDIA AIPerf, pinned in a private venv, for ``hitch bench external --tool aiperf``.

AIPerf is not a dependency of ours: it needs Python >= 3.11 and brings ~1.2 GB (torch-free, but
transformers, pandas, zmq, textual, ...). :func:`install_aiperf` puts ``aiperf==0.13.0`` into
``<HITCH_ROOT>/tools/aiperf-0.13.0`` (``make aiperf``); :func:`installed_aiperf` finds it.

Quirks of 0.13.0, as measured and worked around here:

- the API key is accepted only as ``--api-key`` on its command line (no key file; its YAML config can read a
  variable but then every other setting must move into that file too). The key we pass is the scratch run
  token of the benchmark's own stack, which dies with it, and it is masked in every file we keep;
- the URL is given **without** ``/v1`` (its readiness probe and its chat endpoint append ``/v1/...``);
- a local tokenizer path is taken for a hub id when ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` are set,
  so they are removed from its environment (a local path loads without the network anyway);
- its timing process keeps a core busy for the whole run: on 2 cores beside a real CPU engine it starves
  the engine (16 requests took > 2 minutes instead of ~25 s). Use the fake engine or low request counts
  here; the figures say which engine ran;
- it sends ``max_completion_tokens`` and, for a fixed output length, ``ignore_eos`` through
  ``--extra-inputs`` (our benchmark lock permits it).

Outputs kept per invocation: ``profile_export_aiperf.json`` and ``.csv`` (its summary), its per-request
``profile_export.jsonl`` and its log, keys masked.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from certify.perf.stack import MODEL
from harness.paths import HitchRoot

__all__ = ["AIPERF_VERSION", "aiperf_command", "aiperf_figures", "install_aiperf", "installed_aiperf", "keep_aiperf_outputs"]

AIPERF_VERSION = "0.13.0"
_DONE = ".hitch-installed"
_KEPT = ("profile_export_aiperf.json", "profile_export_aiperf.csv", "profile_export.jsonl")
_FIGURES = (("ttft_ms", "time_to_first_token"), ("itl_ms", "inter_token_latency"), ("e2e_ms", "request_latency"))


def _venv(root: HitchRoot | None = None) -> Path:
    return (root or HitchRoot.at()).tool_envs / f"aiperf-{AIPERF_VERSION}"


def installed_aiperf(root: HitchRoot | None = None) -> Path | None:
    """The ``aiperf`` executable of the pinned private venv, or None when it is not (completely) installed."""
    venv = _venv(root)
    exe = venv / "bin" / "aiperf"
    return exe if exe.is_file() and (venv / _DONE).is_file() else None


def install_aiperf(root: HitchRoot | None = None) -> Path:
    """Create the private venv (the project's base Python, >= 3.11 as AIPerf needs) and install the pinned AIPerf.

    A venv's scripts name their interpreter by absolute path, so it is built in place; the marker file
    written last tells a complete install from an interrupted one (which is started over)."""
    venv = _venv(root)
    if installed_aiperf(root) is None:
        shutil.rmtree(venv, ignore_errors=True)
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"aiperf=={AIPERF_VERSION}"], check=True)
        (venv / _DONE).write_text(AIPERF_VERSION + "\n")
    exe = installed_aiperf(root)
    if exe is None:
        raise SystemExit(f"AIPerf {AIPERF_VERSION} did not install an aiperf executable under {venv}")
    return exe


def aiperf_command(args: argparse.Namespace, base_url: str, tokenizer: str, artifacts: Path) -> tuple[list[str], dict[str, str]]:
    """``aiperf profile`` for one arm (the key is appended by the caller) and its environment."""
    exe = installed_aiperf()
    if exe is None:
        raise SystemExit(f"AIPerf {AIPERF_VERSION} is not installed under HITCH_ROOT/tools (make aiperf)")

    argv = [str(exe), "profile", "--model", MODEL, "--url", base_url, "--endpoint-type", "chat", "--streaming",
            "--tokenizer", tokenizer, "--synthetic-input-tokens-mean", str(args.input_len),
            "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", str(args.output_len),
            "--output-tokens-stddev", "0", "--request-count", str(args.num_prompts), "--concurrency",
            str(args.max_concurrency), "--random-seed", str(args.seed), "--artifact-dir", str(artifacts),
            "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry"]  # fmt: skip
    if not args.disable_ignore_eos:
        argv += ["--extra-inputs", "ignore_eos:true"]
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.pop("OPENAI_API_KEY", None)
    return argv, env


def _find(artifacts: Path, name: str) -> Path | None:
    found = sorted(artifacts.rglob(name)) if artifacts.exists() else []
    return found[0] if found else None


def keep_aiperf_outputs(artifacts: Path, dest: Path, log: str, secrets_: list[str]) -> dict[str, Any] | None:
    """Copy AIPerf's summary and per-request export into ``dest`` with keys masked; return its summary JSON."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "aiperf.log").write_text(log)
    for name in _KEPT:
        src = _find(artifacts, name)
        if src is None:
            continue
        text = src.read_text(errors="replace")
        for s in secrets_:
            text = text.replace(s, "***")
        (dest / name).write_text(text)
    summary = dest / "profile_export_aiperf.json"
    if not summary.exists():
        return None
    data: dict[str, Any] = json.loads(summary.read_text())
    return data


def _metric(export: dict[str, Any], tag: str) -> dict[str, Any]:
    """A metric of the export, wherever 0.13 puts it (top level or under ``records``)."""
    for holder in (export, export.get("records") or {}, export.get("metrics") or {}):
        value = holder.get(tag) if isinstance(holder, dict) else None
        if isinstance(value, dict):
            return value
    return {}


def aiperf_figures(export: dict[str, Any], num_prompts: int) -> dict[str, Any]:
    """Per arm and round, in the shape :func:`certify.external.summarize` takes."""
    fig: dict[str, Any] = {name: {p: _metric(export, tag).get(p) for p in ("p50", "p95", "p99")} for name, tag in _FIGURES}
    fig["req_per_s"] = _metric(export, "request_throughput").get("avg")
    completed = _metric(export, "request_count").get("avg")
    errors = _metric(export, "error_request_count").get("avg")
    fig["completed"] = int(completed) if isinstance(completed, int | float) else 0
    fig["errors"] = max(int(errors) if isinstance(errors, int | float) else 0, num_prompts - fig["completed"])
    tokens = _metric(export, "total_output_tokens").get("avg")
    fig["output_tokens"] = int(tokens) if isinstance(tokens, int | float) else None
    return fig
