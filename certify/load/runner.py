"""One target's load run in locust: ``python -m certify.load.runner --plan FILE --out-dir DIR --result FILE``.

Runs in its own process because importing locust monkey-patches the standard library with gevent; nothing
else in the project imports this module. Drives locust from code (``Environment`` + local runner): a
``FastHttpUser`` posts one of the plan's bodies (chosen by a per-user generator seeded from the schedule's
seed and the user's index, so every target sees the same sequence) to ``/v1/chat/completions`` or
``/v1/responses`` with no wait between requests. A stream is read line by line as it arrives and probed
(:class:`~certify.load.sse.StreamProbe`); the request's time is the whole stream, and each successful
stream fires two custom request events, ``SSE ttft`` and ``SSE itl`` (mean inter-token gap of that
stream), so they appear in locust's stats and CSVs next to ``POST <route>``.

Writes ``<name>_stats.csv``, ``<name>_stats_history.csv`` (a row per entry and the aggregate each second),
``<name>_failures.csv`` and ``<name>_exceptions.csv`` into ``--out-dir`` and the target's figures
(:func:`certify.load.summary.target_figures`) as JSON to ``--result``. The CSVs' ``Aggregated`` rows
count the ttft/itl events too; the figures use the ``POST`` entry.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import gevent  # type: ignore[import-untyped]
import locust  # monkey-patches the standard library on import (nothing before it opens sockets)
from locust import FastHttpUser, constant, task
from locust.env import Environment
from locust.stats import CSV_STATS_INTERVAL_SEC, PERCENTILES_TO_REPORT, StatsCSVFileWriter

from certify.load.schedule import TargetPlan, route_for
from certify.load.sse import StreamProbe, check_unary
from certify.load.summary import target_figures

__all__ = ["main"]

METRIC_TYPE = "SSE"
STOP_TIMEOUT_S = 30.0  # in-flight requests finish after the run time, up to this long


def make_user(plan: TargetPlan, token: str) -> type[FastHttpUser]:
    schedule = plan.schedule
    route = route_for(schedule.api)
    base = urlsplit(plan.base_url)
    path = base.path.rstrip("/") + route.removeprefix("/v1")
    headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json", "Accept-Encoding": "identity"}
    bodies = plan.bodies
    indexes = itertools.count()

    class LoadUser(FastHttpUser):
        host = f"{base.scheme}://{base.netloc}"
        wait_time = constant(0)
        network_timeout = 300.0
        connection_timeout = 30.0

        def on_start(self) -> None:
            self.rng = random.Random(schedule.seed * 1_000_003 + next(indexes))

        @task
        def ask(self) -> None:
            body = bodies[self.rng.randrange(len(bodies))]
            if schedule.stream:
                self._stream(body)
            else:
                self._unary(body)

        def _unary(self, body: str) -> None:
            with self.client.post(path, data=body, headers=headers, catch_response=True, name=route) as resp:
                if resp.status_code != 200:
                    resp.failure(f"HTTP {resp.status_code}")
                elif (why := check_unary(schedule.api, resp.content or b"")) is not None:
                    resp.failure(why)
                else:
                    resp.success()

        def _stream(self, body: str) -> None:
            t0 = time.perf_counter()
            probe = StreamProbe(schedule.api, t0)
            with self.client.post(path, data=body, headers=headers, stream=True, catch_response=True, name=route) as resp:
                size = 0
                raw = getattr(resp, "_response", None)
                if resp.status_code != 200 or raw is None:
                    resp.failure(f"HTTP {resp.status_code}")
                    if raw is not None:
                        raw.read()
                else:
                    # readline returns each SSE line as it arrives; iter_content(n) would wait for n bytes.
                    while line := raw.readline(b"\n"):
                        size += len(line)
                        probe.feed(bytes(line), time.perf_counter())
                    resp.request_meta["response_time"] = (time.perf_counter() - t0) * 1000
                    resp.request_meta["response_length"] = size
                    why = probe.verdict()
                    if why is None:
                        resp.success()
                    else:
                        resp.failure(why)
            if probe.verdict() is None:
                fire = self.environment.events.request.fire
                for name, value in (("ttft", probe.ttft_ms), ("itl", probe.itl_ms)):
                    if value is not None:
                        fire(
                            request_type=METRIC_TYPE,
                            name=name,
                            response_time=value,
                            response_length=0,
                            exception=None,
                            context={},
                        )

    return LoadUser


def run(plan: TargetPlan, out_dir: Path) -> dict[str, Any]:
    token = Path(plan.token_file).read_text().strip()
    user = make_user(plan, token)
    env = Environment(user_classes=[user], host=user.host, stop_timeout=STOP_TIMEOUT_S, catch_exceptions=True)
    route = route_for(plan.schedule.api)
    raw: dict[str, list[float]] = defaultdict(list)

    def on_request(request_type: str, name: str, response_time: float, exception: Exception | None, **_: Any) -> None:
        if exception is None:
            raw[name if request_type == METRIC_TYPE else "request"].append(float(response_time))

    env.events.request.add_listener(on_request)  # type: ignore[no-untyped-call]
    runner = env.create_local_runner()
    writer = StatsCSVFileWriter(env, PERCENTILES_TO_REPORT, str(out_dir / plan.name), full_history=True)
    writer_greenlet = gevent.spawn(writer.stats_writer)
    t0 = time.monotonic()
    runner.start(plan.schedule.users, spawn_rate=plan.schedule.spawn_rate)
    gevent.sleep(plan.schedule.run_time_s)
    runner.quit()  # stops the users (in-flight requests finish, up to STOP_TIMEOUT_S) and the runner
    duration = time.monotonic() - t0
    gevent.sleep(CSV_STATS_INTERVAL_SEC + 0.25)  # one more writer pass, with the final figures
    writer_greenlet.kill()
    writer.close_files()
    entry = env.stats.get(route, "POST")
    return {
        "name": plan.name,
        **target_figures(
            requests=entry.num_requests,
            failures=entry.num_failures,
            exceptions=sum(e["count"] for e in runner.exceptions.values()),
            duration_s=duration,
            latency_ms=raw["request"],
            ttft_ms=raw["ttft"],
            itl_ms=raw["itl"],
        ),
        "errors": {f"{e.method} {e.name}: {e.error}"[:300]: e.occurrences for e in list(env.stats.errors.values())[:20]},
        "locust_version": locust.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m certify.load.runner", description="one target's locust load run")
    p.add_argument("--plan", type=Path, required=True)
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--result", type=Path, required=True)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    result = run(TargetPlan.read(args.plan), args.out_dir)
    args.result.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
