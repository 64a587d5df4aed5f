"""The stack the benchmarks start: an engine, our gateway as its own process, and the bare reference proxy.

:func:`started_stack` yields one :class:`certify.perf.loops.Arm` per target over one engine:

- the engine: the fake (:func:`fixtures.fake_sglang.client.start_fake_engine`, ``max_running`` sized to the
  benchmark's concurrency, optional ``--fake-itl-ms`` pacing so every token is its own chunk) or the
  generic-CPU SGLang runtime under HITCH_ROOT (:func:`fixtures.fake_sglang.parity_engines.launch_engine`,
  the parity flags: 2 running + 2 queued);
- a real draft lock for the benchmark's checkpoint (imported into a scratch root) — with
  ``benchmark=True`` the lock permits the field tools' sampling controls (``ignore_eos``, ``min_tokens``);
- the gateway: ``python -m gateway --spec`` as a separate process (its CPU is measured on its own), one
  registered run; optionally under cProfile (thread CPU time) for the per-chunk profile;
- the reference proxy (:mod:`certify.perf.reference_proxy`), when asked for;
- nginx (:mod:`certify.perf.nginx_relay`), when asked for: the field's native relay, the caller's key
  passing through to the engine as the direct arm sends it.

With ``engine_cores`` the engine is started on those cores only (its threads inherit the mask, so a CPU engine
sizes its thread pool to them) and everything started after it, the gateway, the reference proxy and this
process's load generator, on the other usable cores: the measurement of a machine where the engine leaves
cores to the serving side, beside the default where every process shares every core.

*direct* is the engine's ``/v1`` with its key and the body the gateway would forward (the lock's policy
applied to the caller's body); *gateway* is the run's URL and token with the caller's body. Keys and
tokens travel in 0600 files (``harness.paths.write_secret``), never in argv.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from certify.kit.engines import sglang_command
from certify.kit.probes import read_evidence
from certify.perf.loops import KINDS, Arm
from certify.perf.nginx_relay import started_nginx
from certify.processes import stop_process
from fixtures.checkpoint import tiny_checkpoint_cached
from fixtures.fake_sglang.client import start_fake_engine
from fixtures.fake_sglang.parity_engines import launch_engine
from gateway.policy import apply_policy
from harness.app.locks import draft_lock
from harness.contracts.lock import InferenceLockV1
from harness.paths import HitchRoot, ensure_private_dir, write_secret

__all__ = ["MODEL", "ROUTE", "Stack", "StackOptions", "bench_lock", "caller_body", "started_stack", "tiny_model"]

REPO = Path(__file__).resolve().parents[2]
MODEL = "bench-model"
ROUTE: Final = "/v1/chat/completions"


@dataclass(frozen=True)
class StackOptions:
    engine: str = "fake"  # fake | sglang
    model_dir: Path | None = None  # default: the tiny fixture checkpoint
    permits: int = 64  # the fake's running slots and the lock's (sglang: the engine's own 2)
    max_tokens: int = 16
    fake_itl_ms: float = 0.0
    capture: str = "off"
    benchmark_lock: bool = False
    reference: bool = False
    nginx: bool = False  # Debian's nginx as a third relay (certify.perf.nginx_relay)
    profile_gateway: Path | None = None  # cProfile (thread CPU time) of the gateway process
    # the gateway process's niceness (0..19): on a machine whose engine uses every core, how much of the
    # per-token cost is the gateway's CPU taken from the engine (an experiment's knob; the product runs at 0)
    gateway_nice: int = 0
    # the engine alone on these cores, the gateway and the load generator on the others (None: all share all)
    engine_cores: tuple[int, ...] | None = None


@dataclass
class Stack:
    arms: dict[str, Arm]
    lock: InferenceLockV1
    model_dir: Path
    engine_pid: int
    fake_control: Any | None  # fixtures.fake_sglang.client.FakeControl for the fake engine
    metrics_url: str | None


def tiny_model() -> Path:
    return tiny_checkpoint_cached(Path(tempfile.gettempdir()) / "hitch-bench-ckpt")


def bench_lock(permits: int, model_dir: Path, work: Path, max_tokens: int, benchmark: bool = False) -> InferenceLockV1:
    """A real draft lock: the checkpoint imported into a scratch root, the generic-CPU runtime."""

    lock = draft_lock(
        HitchRoot(work / "root"),
        model_dir,
        "bench",
        "sglang-0.5.23-cpu-generic",
        device="cpu",
        profile="baseline",
        cpu_cores_per_node=2,
        context_tokens=2048,
        benchmark=benchmark,
    )
    # admission sized to the benchmark's engine; the gateway enforces whatever the lock says
    ex = lock.execution.model_copy(update={"max_running_requests": permits, "queue_timeout_ms": 600_000})
    gen = lock.generation.model_copy(update={"max_output_tokens": max(64, max_tokens)})
    return lock.model_copy(update={"execution": ex, "generation": gen})


def _wait_file(path: Path, proc: subprocess.Popen[bytes], timeout: float = 240.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited early ({proc.returncode})")
        if path.exists():
            data: dict[str, Any] = json.loads(path.read_text())
            return data
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {path}")


def caller_body(kind: str, max_tokens: int) -> bytes:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Write one short line."}],
        "max_tokens": max_tokens,
        "stream": kind == "stream",
    }
    return json.dumps(body).encode()


def split_cores(engine_cores: tuple[int, ...]) -> tuple[set[int], set[int]]:
    """``(engine, others)``: the engine's cores and the usable cores left; both must be non-empty."""
    usable = os.sched_getaffinity(0)
    engine = set(engine_cores)
    if not engine or not engine <= usable:
        raise SystemExit(f"--engine-cores {sorted(engine)}: not among this process's usable cores {sorted(usable)}")
    others = usable - engine
    if not others:
        raise SystemExit(f"--engine-cores {sorted(engine)} leaves no usable core for the gateway and the load generator")
    return engine, others


@contextmanager
def started_stack(opts: StackOptions, work: Path) -> Iterator[Stack]:
    private = ensure_private_dir(work / "private")
    model_dir = opts.model_dir or tiny_model()
    split = split_cores(opts.engine_cores) if opts.engine_cores else None
    with ExitStack() as stack:
        fake_control = None
        if split is not None:
            stack.callback(os.sched_setaffinity, 0, os.sched_getaffinity(0))
            os.sched_setaffinity(0, split[0])  # the engine's processes inherit this mask
        if opts.engine == "fake":
            extra = ["--fake-stop-after", "0"] + (["--fake-itl-ms", str(opts.fake_itl_ms)] if opts.fake_itl_ms else [])
            fake = start_fake_engine(model_dir, work / "engine", *extra, served=MODEL, max_running=opts.permits)
            stack.callback(fake.stop)
            engine_url, key, engine_pid, fake_control, permits = fake.base, fake.key, fake.proc.pid, fake.control, opts.permits
        else:
            command = sglang_command()
            if command is None:
                raise SystemExit("--engine sglang: the generic-CPU SGLang runtime is not installed under HITCH_ROOT")
            key = "ek-" + secrets.token_urlsafe(24)
            real = launch_engine(command, model_dir, work / "engine", key, "ak-" + secrets.token_urlsafe(24), served=MODEL)
            stack.callback(real.stop, 10.0)
            engine_url, engine_pid, permits = real.base, real.proc.pid, 2
        if split is not None:
            os.sched_setaffinity(0, split[1])  # the gateway, the reference proxy and this load generator
        key_file = private / "engine.key"
        write_secret(key_file, key)

        lock = bench_lock(permits, model_dir, work, opts.max_tokens, benchmark=opts.benchmark_lock)
        lock_file = work / "lock.json"
        lock_file.write_text(lock.model_dump_json())
        target = {"base_url": engine_url, "engine_key_file": str(key_file), "service_id": "bench", "epoch": 1,
                  "lock_file": str(lock_file), "wire_model": MODEL, "tokenizer_dir": str(model_dir)}  # fmt: skip
        spec = {
            "state_dir": str(work / "gw"),
            "capture": opts.capture,
            "targets": [target],
            "runs": [{"run_id": "bench-run", "target": 0}],
            "ready_file": str(work / "gw.ready"),
        }
        (work / "gw.spec").write_text(json.dumps(spec))
        spec_arg = str(work / "gw.spec")
        if opts.profile_gateway is not None:
            code = (
                "import cProfile, time\nfrom gateway.standalone import main\n"
                "pr = cProfile.Profile(time.thread_time)\npr.enable()\n"
                f"main(['--spec', {spec_arg!r}])\npr.disable()\npr.dump_stats({str(opts.profile_gateway)!r})\n"
            )
            gw_cmd = [sys.executable, "-c", code]
        else:
            gw_cmd = [sys.executable, "-m", "gateway", "--spec", spec_arg]
        gw = subprocess.Popen(gw_cmd, cwd=REPO)
        stack.callback(stop_process, gw, 10)
        if opts.gateway_nice:
            os.setpriority(os.PRIO_PROCESS, gw.pid, opts.gateway_nice)  # before it serves: every request sees it
        ready = _wait_file(work / "gw.ready", gw)
        binding = ready["bindings"][0]
        run_token = Path(binding["token_ref"]).read_text().strip()

        sent = {k: apply_policy(ROUTE, caller_body(k, opts.max_tokens), lock, MODEL).body for k in KINDS}
        caller = {k: caller_body(k, opts.max_tokens) for k in KINDS}
        ex = lock.execution
        json_ct = {"Content-Type": "application/json"}
        arms = {
            "direct": Arm("direct", engine_url + ROUTE, {"Authorization": "Bearer " + key, **json_ct}, sent, permits),
            "gateway": Arm(
                "gateway",
                binding["base_url"] + "/chat/completions",
                {"Authorization": "Bearer " + run_token, **json_ct},
                caller,
                ex.max_running_requests + ex.max_queued_requests,
                gw.pid,
                evidence=functools.partial(read_evidence, work / "gw", binding["binding_id"]),
            ),
        }
        if opts.reference:
            ref_token = secrets.token_urlsafe(24)
            write_secret(private / "ref.token", ref_token)
            ref = subprocess.Popen(
                [sys.executable, "-m", "certify.perf.reference_proxy", "--upstream", engine_url, "--engine-key-file",
                 str(key_file), "--token-file", str(private / "ref.token"), "--ready-file", str(work / "ref.ready")],
                cwd=REPO,
            )  # fmt: skip
            stack.callback(stop_process, ref, 10)
            ref_url = _wait_file(work / "ref.ready", ref)["base_url"]
            arms["reference"] = Arm(
                "reference", ref_url + ROUTE, {"Authorization": "Bearer " + ref_token, **json_ct}, sent, 0, ref.pid
            )
        if opts.nginx:
            relay = stack.enter_context(started_nginx(engine_url, work / "nginx"))
            engine_auth = {"Authorization": "Bearer " + key, **json_ct}  # passed through to the engine
            arms["nginx"] = Arm("nginx", relay.base_url + ROUTE, engine_auth, sent, 0, relay.pid)
        yield Stack(arms, lock, model_dir, engine_pid, fake_control, ready.get("metrics_url"))
