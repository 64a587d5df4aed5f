#!/usr/bin/env python3
"""``make setup``'s driver: the independent installs two at a time, a line per step, one summary.

Every step is a Makefile target (one definition of each install; each is idempotent, so a second setup only
checks). Two workers take the steps in the order below, each the first one whose prerequisites are done, so the
machine's two cores and its network are both busy; a step that uses Debian's packages or the Docker engine
(``system``: one ``apt-get``/``dpkg`` user at a time) waits while another system step runs. The generic-CPU SGLang
runtime comes first: the real-SGLang image waits for it, and the two are the longest chain.

``--only STEP ...`` runs a subset: ``make certify`` asks for what a certification uses (the runtime, the Docker
engine with its images, Harbor's base image and venv, the Codex CLI), ``make setup`` for everything.

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
    system: bool  # uses apt/dpkg or the Docker engine: one such step at a time
    what: str
    sizes: tuple[str, ...] = ()  # paths (``$HITCH_ROOT/...`` allowed) and ``image:LABEL=VALUE`` whose size is shown
    after: tuple[str, ...] = ()  # steps it waits for
    optional: bool = False
    # filled in as it runs
    status: str = "waiting"
    seconds: float = 0.0
    size_bytes: int | None = None
    done: threading.Event = field(default_factory=threading.Event)


_FIXTURE = "image:dev.hitch.fixture-image="
STEPS = [  # the order the workers take them in
    Step("runtime", False, "generic-CPU SGLang runtime", ("$HITCH_ROOT/inference/runtimes",)),
    Step(
        "docker",
        True,
        "Docker engine, fake-engine and trial images",
        (_FIXTURE + "fake-sglang", _FIXTURE + "eval-trial"),
        optional=True,
    ),
    Step("codex", True, "pinned Codex CLI", (".tools/codex",)),  # apt-get installs npm where it is missing
    Step("browser", True, "Debian's Chromium (report DOM tests)", optional=True),
    Step("nginx", True, "Debian's nginx (the overhead benchmark's native relay)", optional=True),
    Step("harbor-image", True, "Harbor tasks' base image", (_FIXTURE + "harbor-base",), ("docker",), True),
    Step("harbor-venv", False, "Harbor's private venv", ("$HITCH_ROOT/tools/harbor",)),
    Step("sglang-image", True, "real SGLang as a local image", ("image:dev.hitch.runtime-image",), ("runtime", "docker"), True),
    Step("aiperf", False, "AIPerf's private venv", ("$HITCH_ROOT/tools/aiperf-0.13.0",), optional=True),
]
WORKERS = 2

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
    failed_deps = [d for d in step.after if by_name[d].status in ("failed", "skipped")]
    if failed_deps:
        step.status = "skipped"
        say(f"- {step.name}: skipped ({', '.join(failed_deps)} failed)")
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


class Scheduler:
    """Hands a worker the first waiting step whose prerequisites are done, never two system steps at once."""

    def __init__(self, steps: list[Step], by_name: dict[str, Step]) -> None:
        self.waiting = list(steps)
        self.by_name = by_name
        self.system_busy = False
        self.cond = threading.Condition()

    def _ready(self, step: Step) -> bool:
        return all(self.by_name[d].done.is_set() for d in step.after) and not (step.system and self.system_busy)

    def take(self) -> Step | None:
        with self.cond:
            while self.waiting:
                step = next((s for s in self.waiting if self._ready(s)), None)
                if step is not None:
                    self.waiting.remove(step)
                    self.system_busy = self.system_busy or step.system
                    return step
                self.cond.wait()
            return None

    def finished(self, step: Step) -> None:
        with self.cond:
            if step.system:
                self.system_busy = False
            step.done.set()
            self.cond.notify_all()

    def work(self) -> None:
        while (step := self.take()) is not None:
            try:
                run_step(step, self.by_name)
            finally:
                self.finished(step)


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
    scheduler = Scheduler(steps, by_name)
    t0 = time.monotonic()
    threads = [threading.Thread(target=scheduler.work, daemon=True) for _ in range(min(WORKERS, len(steps)))]
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
