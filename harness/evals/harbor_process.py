"""The Harbor driver subprocess of one evaluation, seen from hitch: JSON lines in, events out.

:class:`DriverProcess` starts ``<harbor venv>/bin/python harbor_driver.py`` (:mod:`harness.evals.harbor_driver`)
when the first trial is ready, writes its lines (a trial to start, a trial to cancel) under a lock so any
thread may send, and reads its events on a thread of its own into the evaluation's event queue; the end of
its output is the event ``driver_exit``. :meth:`DriverProcess.close` ends its input (no more trials), waits
for it to finish the trials it has, and kills it only when it does not within the bound.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

from harness.evals.harbor_install import HarborInstall

__all__ = ["DRIVER", "DriverProcess"]

DRIVER = Path(__file__).resolve().parent / "harbor_driver.py"


class DriverProcess:
    def __init__(self, install: HarborInstall, workdir: Path, sys_path: list[str], events: queue.Queue[dict[str, Any]]) -> None:
        self.install, self.workdir, self.sys_path, self.events = install, workdir, sys_path, events
        self._proc: subprocess.Popen[str] | None = None
        self._stdin: IO[str] | None = None
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._log: IO[str] | None = None

    def _start(self) -> None:
        self._log = (self.workdir / "driver.log").open("a", encoding="utf-8")
        proc = subprocess.Popen(
            [str(self.install.python), str(DRIVER)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, env=self.install.environ(),
            cwd=self.workdir,
        )  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None
        self._proc, self._stdin = proc, proc.stdin
        self._reader = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self._reader.start()
        self._write({"sys_path": self.sys_path, "trials": []})

    def _read(self, out: IO[str]) -> None:
        for line in out:
            with contextlib.suppress(ValueError):
                self.events.put(json.loads(line))
        self.events.put({"event": "driver_exit"})

    def _write(self, message: dict[str, Any]) -> bool:
        if self._stdin is None or self._stdin.closed:
            return False
        try:
            self._stdin.write(json.dumps(message) + "\n")
            self._stdin.flush()
        except (OSError, ValueError):
            return False
        return True

    def start_trial(self, spec: dict[str, Any]) -> bool:
        """Start one more trial (the process itself at the first)."""
        with self._lock:
            if self._proc is None:
                self._start()
            return self._write({"trial": spec})

    def cancel(self, name: str) -> bool:
        """Cancel one trial in Harbor; False when the driver no longer takes input."""
        with self._lock:
            return self._write({"cancel": name})

    def close(self, timeout_s: float = 120.0) -> None:
        """No more input: the driver ends once its trials have; killed when it has not within ``timeout_s``."""
        with self._lock:
            if self._stdin is not None:
                with contextlib.suppress(OSError):
                    self._stdin.close()
            proc = self._proc
        if proc is None:
            return
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
        if self._log is not None:
            self._log.close()
