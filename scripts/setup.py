#!/usr/bin/env python3
"""``make setup``'s driver: the independent installs in two lanes at once, a line per step, one summary.

Every step is a Makefile target (one definition of each install; each is idempotent, so a second setup only
checks). They run in two lanes, so the machine's two cores and its network are both busy:

- the system lane uses Debian's packages and the Docker engine (one ``apt-get``/``dpkg`` user at a time):
  the Docker engine with the fake-engine and trial images, Chromium, Harbor's task base image, and the
  real-SGLang image (which waits for the runtime from the other lane);
- the download lane fills private venvs and prefixes: the generic-CPU SGLang runtime, Harbor's venv,
  AIPerf's venv, the pinned Codex CLI.

Each step's output goes to ``.hitch-ci/setup/<step>.log``; the terminal gets a line when a step starts and
when it ends (seconds, and the size of what it installed), the log's tail when one fails, and a summary
table. A step marked optional (what needs root or a Docker engine) may fail without failing setup: the tests
that need it then skip, except in CI, whose ``HITCH_REQUIRE_*`` variables make them fail. Exit status: 1 when
a required step failed.

Usage: ``python scripts/setup.py [--only STEP ...]`` (``make setup`` runs it after the project's venv).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.settings import settings

REPO = Path(__file__).resolve().parents[1]
LOGS = REPO / ".hitch-ci" / "setup"


@dataclass
class Step:
    name: str  # the Makefile target
    lane: str
    what: str
    sizes: tuple[str, ...] = ()  # paths (``$HITCH_ROOT/...`` allowed) and ``image:LABEL=VALUE`` whose size is shown
    after: tuple[str, ...] = ()  # steps of the other lane it waits for
    optional: bool = False
    # filled in as it runs
    status: str = "waiting"
    seconds: float = 0.0
    size_bytes: int | None = None
    done: threading.Event = field(default_factory=threading.Event)


_FIXTURE = "image:dev.hitch.fixture-image="
STEPS = [
    Step(
        "docker",
        "system",
        "Docker engine, fake-engine and trial images",
        (_FIXTURE + "fake-sglang", _FIXTURE + "eval-trial"),
        optional=True,
    ),
    Step("browser", "system", "Debian's Chromium (report DOM tests)", optional=True),
    Step("harbor-image", "system", "Harbor tasks' base image", (_FIXTURE + "harbor-base",), optional=True),
    Step("sglang-image", "system", "real SGLang as a local image", ("image:dev.hitch.runtime-image",), ("runtime",), True),
    Step("runtime", "download", "generic-CPU SGLang runtime", ("$HITCH_ROOT/inference/runtimes",)),
    Step("harbor-venv", "download", "Harbor's private venv", ("$HITCH_ROOT/tools/harbor",)),
    Step("aiperf", "download", "AIPerf's private venv", ("$HITCH_ROOT/tools/aiperf-0.13.0",), optional=True),
    Step("codex", "download", "pinned Codex CLI", (".tools/codex",)),
]

_print_mutex = threading.Lock()


def say(line: str) -> None:
    with _print_mutex:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def _human(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size:.1f} GB"


def _dir_bytes(path: Path) -> int:
    out = subprocess.run(["du", "-sbL", str(path)], capture_output=True, text=True, check=False)
    return int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout else 0


def _image_bytes(label: str) -> int:
    ids = subprocess.run(
        ["docker", "images", "-q", "--filter", f"label={label}"], capture_output=True, text=True, check=False
    ).stdout.split()
    total = 0
    for image in sorted(set(ids)):
        out = subprocess.run(["docker", "image", "inspect", "-f", "{{.Size}}", image], capture_output=True, text=True)
        total += int(out.stdout.strip() or 0) if out.returncode == 0 else 0
    return total


def measure(step: Step) -> int | None:
    if not step.sizes:
        return None
    total = 0
    for spec in step.sizes:
        if spec.startswith("image:"):
            total += _image_bytes(spec.removeprefix("image:"))
            continue
        path = Path(spec.replace("$HITCH_ROOT", str(settings().hitch_root)))
        path = path if path.is_absolute() else REPO / path
        if path.exists():
            total += _dir_bytes(path)
    return total


def run_step(step: Step, by_name: dict[str, Step]) -> None:
    for dep in step.after:
        by_name[dep].done.wait()
    failed_deps = [d for d in step.after if by_name[d].status == "failed"]
    if failed_deps:
        step.status = "skipped"
        say(f"- {step.name}: skipped ({', '.join(failed_deps)} failed)")
        step.done.set()
        return
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{step.name}.log"
    say(f"> {step.name}: {step.what}")
    t0 = time.monotonic()
    with log.open("w") as out:
        code = subprocess.run(
            ["make", "--no-print-directory", step.name], cwd=REPO, stdout=out, stderr=subprocess.STDOUT, check=False
        ).returncode
    step.seconds = time.monotonic() - t0
    step.status = "ok" if code == 0 else "failed"
    step.size_bytes = measure(step) if code == 0 else None
    if code == 0:
        say(f"+ {step.name}: done in {step.seconds:.1f} s ({_human(step.size_bytes)})")
    else:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        note = "optional: the tests that need it skip outside CI" if step.optional else "required"
        say(f"! {step.name}: failed (exit {code}) after {step.seconds:.1f} s, {note}; {log.relative_to(REPO)}:")
        with _print_mutex:
            for line in tail:
                print(f"    {line}", flush=True)
    step.done.set()


def run_lane(steps: list[Step], by_name: dict[str, Step]) -> None:
    for step in steps:
        run_step(step, by_name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--only", nargs="+", choices=[s.name for s in STEPS], help="run these steps only")
    args = parser.parse_args(argv)
    steps = [s for s in STEPS if not args.only or s.name in args.only]
    by_name = {s.name: s for s in STEPS}
    for s in STEPS:
        if s not in steps:
            s.status = "not asked"
            s.done.set()
    lanes = [[s for s in steps if s.lane == lane] for lane in ("system", "download")]
    t0 = time.monotonic()
    threads = [threading.Thread(target=run_lane, args=(lane, by_name), daemon=True) for lane in lanes if lane]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    width = max(len(s.name) for s in steps)
    print(f"\nsetup: {len(steps)} steps in {wall:.1f} s (sum of steps {sum(s.seconds for s in steps):.1f} s)")
    for s in steps:
        print(f"  {s.name:<{width}}  {s.status:<8} {s.seconds:7.1f} s  {_human(s.size_bytes):>9}  {s.what}")
    failed = [s.name for s in steps if s.status != "ok" and not s.optional]
    if failed:
        print(f"setup failed: {', '.join(failed)} (logs in {LOGS.relative_to(REPO)})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if shutil.which("make") is None:
        sys.exit("setup needs make")
    sys.exit(main())
