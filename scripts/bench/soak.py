#!/usr/bin/env python3
"""Soak: N agents stream against one ``hitch local serve`` for D minutes (or until R requests), on a fresh root.

What it does, with the product's own commands only:

1. imports ``fixture:tiny`` into a fresh root (``--root``, default a temporary folder), starts that root's
   daemon, and runs ``hitch local serve local/tiny --engine ENGINE --capture MODE --json`` (one run);
2. starts ``--agents`` client processes, each sending streamed chat completions (``max_tokens`` small) one
   after the other through the gateway with the run's token, until ``--minutes`` pass or ``--requests`` are
   sent in all; every answer is read to its end and counted by HTTP status (a stream that breaks is a failure);
3. samples the daemon's RSS, open descriptors and threads every ``--sample-s`` during the load and after;
4. sends ``serve`` SIGTERM and measures how long it takes to exit (the run's end: binding revoked, evidence
   written and sealed) and when ``run.json`` carries its ``ref_digest``;
5. counts the rows of ``attempts.jsonl`` against the requests sent, the files under the run's folder, and
   runs ``hitch run verify`` (its time and verdict); then stops the daemon.

It prints one JSON object (and writes it to ``--out`` when given): requests, failures by status, rows,
``rows == requests``, RSS at start / first third / last third / peak / after the run's end (MB), descriptors
and threads (min / max), files under the run, serve's exit after SIGTERM, the run's end (wall time, and the
daemon's CPU seconds for it, which the machine's load does not inflate), verify. A benchmark,
not a test: figures depend on the machine and on what else runs on it.

Usage::

    python scripts/bench/soak.py --agents 8 --minutes 10
    python scripts/bench/soak.py --agents 8 --requests 30000 --capture metadata
    python scripts/bench/soak.py --agents 4 --minutes 15 --engine sglang   # HITCH_ROOT's runtime, linked in
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

HITCH = [sys.executable, "-c", "from harness.cli.app import main; main()"]


def _hitch(root: Path, *args: str, timeout: float = 600) -> dict[str, Any]:
    proc = subprocess.run([*HITCH, *args, "--root", str(root), "--json"], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"hitch {' '.join(args)} failed ({proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def _agent(
    base_url: str, token: str, model: str, deadline: float, budget: Any, max_tokens: int, out: Any
) -> None:  # pragma: no cover - a client process
    counts: Counter[str] = Counter()
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": max_tokens, "stream": True}
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=120) as client:
        while time.monotonic() < deadline:
            with budget.get_lock():
                if budget.value <= 0:
                    break
                budget.value -= 1
            counts["sent"] += 1
            try:
                with client.stream("POST", "/chat/completions", json=body) as r:
                    tail = b""
                    for chunk in r.iter_bytes():
                        tail = (tail + chunk)[-64:]
                    ok = r.status_code == 200 and b"data: [DONE]" in tail
                    counts["200" if ok else f"http_{r.status_code}" if r.status_code != 200 else "broken_stream"] += 1
            except httpx.HTTPError as exc:
                counts[type(exc).__name__] += 1
    out.put(dict(counts))


class _Sampler(threading.Thread):
    def __init__(self, pid: int, every_s: float) -> None:
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.every_s = every_s
        self.samples: list[tuple[float, float, int, int]] = []  # (t, rss MB, fds, threads)
        self.stop = threading.Event()

    def sample(self) -> tuple[float, float, int, int]:
        with self.proc.oneshot():
            row = (time.monotonic(), self.proc.memory_info().rss / 2**20, self.proc.num_fds(), self.proc.num_threads())
        self.samples.append(row)
        return row

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            try:
                self.sample()
            except psutil.Error:
                return


def _span(values: list[int], after: int) -> dict[str, int]:
    return {"min": min(values), "max": max(values), "after": after}


def _thirds(values: list[float]) -> tuple[float, float]:
    n = max(1, len(values) // 3)
    return statistics.mean(values[:n]), statistics.mean(values[-n:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--requests", type=int, default=0, help="stop after this many requests in all (0: no bound)")
    ap.add_argument("--capture", default="metadata", choices=["off", "metadata", "full"])
    ap.add_argument("--engine", default="fake", choices=["fake", "sglang"])
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--sample-s", type=float, default=1.0)
    ap.add_argument("--root", type=Path, default=None, help="a fresh folder for the root (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=None, help="also write the summary JSON here")
    args = ap.parse_args()

    from fixtures.checkpoint import tiny_checkpoint_cached
    from harness.paths import HitchRoot
    from harness.store.importer import import_model

    root_dir = args.root or Path(tempfile.mkdtemp(prefix="hitch-soak-"))
    root = HitchRoot(root_dir)
    import_model(root, tiny_checkpoint_cached(Path(tempfile.gettempdir()) / "hitch-soak-ckpt"), "tiny")
    if args.engine == "sglang":  # the runtime installed under the default root, linked in (nothing installed here)
        root.runtime_envs.parent.mkdir(parents=True, exist_ok=True)
        root.runtime_envs.symlink_to(HitchRoot.at().runtime_envs)
    daemon = _hitch(root_dir, "daemon", "start")
    pid = int(daemon["pid"])
    serve = subprocess.Popen(
        [*HITCH, "local", "serve", "local/tiny", "--device", "cpu", "--engine", args.engine, "--capture", args.capture,
         "--root", str(root_dir), "--json", *(["--allow-uncertified"] if args.engine == "sglang" else [])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        if not line:
            raise SystemExit(f"hitch local serve ended: {serve.stderr.read() if serve.stderr else ''}")
        try:
            run = json.loads(line)
        except json.JSONDecodeError:  # an error is one indented JSON document: show it whole
            raise SystemExit(f"hitch local serve refused: {line}{serve.stdout.read()}") from None
        token = Path(run["token_file"]).read_text(encoding="utf-8").strip()
        sampler = _Sampler(pid, args.sample_s)
        start = sampler.sample()
        sampler.start()
        budget = mp.Value("q", args.requests if args.requests > 0 else 1 << 62)
        out: Any = mp.Queue()
        deadline = time.monotonic() + args.minutes * 60
        t0 = time.monotonic()
        agents = [
            mp.Process(target=_agent, args=(run["base_url"], token, run["wire_model"], deadline, budget, args.max_tokens, out))
            for _ in range(args.agents)
        ]
        for a in agents:
            a.start()
        counts: Counter[str] = Counter()
        for _ in agents:
            counts.update(out.get())
        for a in agents:
            a.join()
        load_s = time.monotonic() - t0
        during = list(sampler.samples)
        cpu_before = sum(sampler.proc.cpu_times()[:2])
        t_term = time.monotonic()
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=600)
        serve_exit_s = time.monotonic() - t_term
        run_json = root.runs / run["run_id"] / "run.json"
        while "ref_digest" not in (record := json.loads(run_json.read_text())) or record["ref_digest"] is None:
            if time.monotonic() - t_term > 600:
                break
            time.sleep(0.05)
        run_end_s = time.monotonic() - t_term
        end_cpu_s = sum(sampler.proc.cpu_times()[:2]) - cpu_before  # the daemon's CPU for the run's end (load-proof)
        time.sleep(max(3 * args.sample_s, 3.0))  # the daemon after the run's end
        sampler.stop.set()
        sampler.join()
        after = sampler.sample()
        run_dir = root.runs / run["run_id"]
        attempts = run_dir / "inference" / "attempts.jsonl"
        with attempts.open("rb") as handle:
            rows = sum(1 for _ in handle)
        files = sum(1 for p in run_dir.rglob("*") if p.is_file())
        t_verify = time.monotonic()
        verify = subprocess.run([*HITCH, "run", "verify", run["run_id"], "--root", str(root_dir), "--json"],
                                capture_output=True, text=True, timeout=600)  # fmt: skip
        verify_s = time.monotonic() - t_verify
        rss = [s[1] for s in during] or [start[1]]
        first, last = _thirds(rss)
        summary = {
            "agents": args.agents,
            "engine": args.engine,
            "capture": args.capture,
            "load_s": round(load_s, 1),
            "requests": counts["sent"],
            "ok": counts["200"],
            "failures": {k: v for k, v in counts.items() if k not in ("sent", "200")},
            "req_per_s": round(counts["sent"] / load_s, 1) if load_s else None,
            "rows": rows,
            "rows_equal_requests": rows == counts["sent"],
            "rss_mb": {
                "start": round(start[1], 1),
                "first_third": round(first, 1),
                "last_third": round(last, 1),
                "peak": round(max(rss), 1),
                "after_run_end": round(after[1], 1),
            },
            "fds": _span([s[2] for s in during or [start]], after[2]),
            "threads": _span([s[3] for s in during or [start]], after[3]),
            "files_under_run": files,
            "serve_exit_after_sigterm_s": round(serve_exit_s, 2),
            "run_sealed_after_sigterm_s": round(run_end_s, 2),
            "daemon_cpu_s_for_the_end": round(end_cpu_s, 2),
            "verify_ok": verify.returncode == 0 and bool(json.loads(verify.stdout or "{}").get("ok")),
            "verify_s": round(verify_s, 2),
            "run_id": run["run_id"],
            "root": str(root_dir),
        }
        text = json.dumps(summary, indent=2)
        print(text)
        if args.out is not None:
            args.out.write_text(text + "\n")
    finally:
        if serve.poll() is None:
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=120)
        subprocess.run([*HITCH, "daemon", "stop", "--root", str(root_dir), "--json"], capture_output=True, timeout=300)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
