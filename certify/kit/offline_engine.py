"""One engine serving with the network cut: run inside ``unshare --net`` (a namespace whose only interface is
loopback, so no route leads off the machine), it starts the session's lock exactly as the process launcher
starts it (same argv, environment allow-list, core pinning, keys), waits for readiness (``/server_info``
against the lock, Responses and SSE probes), sends one chat request, tries to reach the outside (TCP to
public addresses, a DNS lookup), stops the engine and prints one JSON object on stdout.

:func:`run_offline` is what a check calls: it builds the namespace, runs this module in it and returns the
facts. Nothing secret crosses the command line: the request on stdin names the root, the lock and the
engine; the keys are issued inside, under the root's private folder of a throw-away service id, and removed
after (the engine log is returned, redacted by the launcher's log pump, before its folder is removed).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from certify.timeline import span
from harness.engine import prepare_launch, wait_ready
from harness.launch.process import ProcessLauncher
from harness.lock import validate_lock
from harness.net import free_port
from harness.paths import HitchRoot
from harness.service.starter_supervisor import EngineChoice, engine_program
from harness.store import model_files_dir

__all__ = ["OUTSIDE", "run_offline"]

# Public anycast resolvers: reachable from any machine with a route out, never part of this one.
OUTSIDE: tuple[tuple[str, int], ...] = (("1.1.1.1", 443), ("8.8.8.8", 53), ("2606:4700:4700::1111", 443))
_DNS_NAME = "huggingface.co"


def _outbound() -> dict[str, Any]:
    """What each attempt to leave the machine ended with: ``connected`` or the error's name."""
    attempts: dict[str, str] = {}
    for host, port in OUTSIDE:
        try:
            with socket.create_connection((host, port), timeout=5):
                attempts[f"{host}:{port}"] = "connected"
        except OSError as exc:
            attempts[f"{host}:{port}"] = type(exc).__name__ + (f"[{exc.errno}]" if exc.errno else "")
    try:
        socket.getaddrinfo(_DNS_NAME, 443)
        dns = "resolved"
    except OSError as exc:
        dns = type(exc).__name__
    routes = subprocess.run(["ip", "-j", "route", "show", "table", "all"], capture_output=True, text=True, check=False)
    links = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=False)
    return {
        "tcp": attempts,
        "dns": dns,
        "routes": json.loads(routes.stdout or "[]"),
        "interfaces": [link.get("ifname") for link in json.loads(links.stdout or "[]")],
    }


async def _serve_offline(req: dict[str, Any]) -> dict[str, Any]:
    root = HitchRoot(Path(req["root"]))
    lock = validate_lock(req["lock"])
    service_id = req["service_id"]
    program = engine_program(root, lock, EngineChoice(engine=req["engine"]))
    launch = prepare_launch(
        root, lock, model_files_dir(root, lock.model_id), program, service_id=service_id, epoch=1, port=free_port()
    )
    engine = await ProcessLauncher().start(launch.spec)
    try:
        report = await wait_ready(
            engine, launch.keys, launch.wire_model, launch.expected, lock.execution.startup_timeout_ms / 1000
        )
        outbound = _outbound()  # while the engine runs, from its namespace
        async with httpx.AsyncClient(base_url=engine.base_url, trust_env=False) as client:
            resp = await client.post(
                "/v1/chat/completions",
                json={"model": launch.wire_model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8},
                headers={"Authorization": f"Bearer {launch.keys.api_key}"},
                timeout=120.0,
            )
        body = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else None
        choices = body.get("choices") if isinstance(body, dict) else None
        usage = body.get("usage") if isinstance(body, dict) else None
        return {
            "ready_steps": report.steps,
            "status": resp.status_code,
            "finish_reason": choices[0].get("finish_reason") if choices else None,
            "completion_tokens": usage.get("completion_tokens") if isinstance(usage, dict) else None,
            "outbound": outbound,
            "cpu_cores": list(launch.spec.cpu_cores),
            "engine_env_offline": {k: launch.spec.env.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")},
        }
    finally:
        await engine.stop(30.0)


def run_offline(root: HitchRoot, lock: dict[str, Any], engine: str, timeout_s: float = 900.0) -> dict[str, Any]:
    """Run the lock's engine in a fresh network namespace with loopback only; the facts, or ``error``."""
    service_id = "offline-" + secrets.token_hex(6)
    request = json.dumps({"root": str(root.path), "lock": lock, "engine": engine, "service_id": service_id})
    # ``ip link set lo up`` first: a new namespace's loopback is down, and the engine still talks to itself.
    inner = 'ip link set lo up && exec "$0" -m certify.kit.offline_engine'
    try:
        with span("offline engine (no network) start and probe", engine="private"):
            proc = subprocess.run(
                ["unshare", "--net", "--", "sh", "-c", inner, sys.executable],
                input=request,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
                cwd=Path(__file__).resolve().parents[1],
            )
        log_path = root.service_dir(service_id) / "engine.log"
        log = log_path.read_text(errors="replace")[-4000:] if log_path.is_file() else ""
    finally:
        shutil.rmtree(root.private_dir(service_id), ignore_errors=True)
        shutil.rmtree(root.service_dir(service_id), ignore_errors=True)
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}", "stderr": proc.stderr[-2000:], "engine_log": log}
    facts: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    facts["engine_log"] = log
    return facts


def main() -> None:
    facts = asyncio.run(_serve_offline(json.loads(sys.stdin.read())))
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
