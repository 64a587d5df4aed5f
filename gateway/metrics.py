"""Prometheus metrics of the gateway, served on their own loopback port (text exposition 0.0.4).

Owns :class:`GatewayMetrics` (plain counters, gauges and fixed-bucket histograms updated in O(1) on the
request path; no client library) and :func:`build_metrics_app`. Labels carry routes, statuses, error codes
and service ids — never tokens, keys or run payloads.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterable

from aiohttp import web

__all__ = ["GatewayMetrics", "Histogram", "build_metrics_app"]

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class Histogram:
    __slots__ = ("counts", "sum", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(_BUCKETS) + 1)
        self.sum = 0.0
        self.total = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(_BUCKETS, seconds)] += 1
        self.sum += seconds
        self.total += 1

    def lines(self, name: str, labels: str) -> Iterable[str]:
        running = 0
        sep = "," if labels else ""
        for bound, count in zip(_BUCKETS, self.counts, strict=False):
            running += count
            yield f'{name}_bucket{{{labels}{sep}le="{bound}"}} {running}'
        yield f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.total}'
        yield f"{name}_sum{{{labels}}} {self.sum}"
        yield f"{name}_count{{{labels}}} {self.total}"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class GatewayMetrics:
    def __init__(self) -> None:
        self.requests: Counter[tuple[str, str]] = Counter()  # (route, status)
        self.refusals: Counter[str] = Counter()  # error code
        self.not_found = 0
        self.open_streams = 0
        self.e2e: dict[str, Histogram] = {}
        self.ttft: dict[str, Histogram] = {}
        self.queue = Histogram()
        self.queue_gauges: Callable[[], list[tuple[str, int, int, int, int, int, int]]] = list

    def observe_request(self, route: str, status: str, e2e_s: float | None, ttft_s: float | None) -> None:
        self.requests[(route, status)] += 1
        if e2e_s is not None:
            hist = self.e2e.get(route)
            if hist is None:
                hist = self.e2e[route] = Histogram()
            hist.observe(e2e_s)
        if ttft_s is not None:
            hist = self.ttft.get(route)
            if hist is None:
                hist = self.ttft[route] = Histogram()
            hist.observe(ttft_s)

    def render(self) -> str:
        out: list[str] = []
        out.append("# HELP hitch_gateway_requests_total Requests that reached a run's allowed route, by outcome.")
        out.append("# TYPE hitch_gateway_requests_total counter")
        for (route, status), n in sorted(self.requests.items()):
            out.append(f'hitch_gateway_requests_total{{route="{_esc(route)}",status="{status}"}} {n}')
        out.append("# HELP hitch_gateway_refusals_total Requests refused by the gateway, by error code.")
        out.append("# TYPE hitch_gateway_refusals_total counter")
        for code, n in sorted(self.refusals.items()):
            out.append(f'hitch_gateway_refusals_total{{code="{code}"}} {n}')
        out.append("# TYPE hitch_gateway_route_not_found_total counter")
        out.append(f"hitch_gateway_route_not_found_total {self.not_found}")
        out.append("# TYPE hitch_gateway_open_streams gauge")
        out.append(f"hitch_gateway_open_streams {self.open_streams}")
        for name, hists in (("hitch_gateway_e2e_seconds", self.e2e), ("hitch_gateway_ttft_seconds", self.ttft)):
            out.append(f"# TYPE {name} histogram")
            for route, hist in sorted(hists.items()):
                out.extend(hist.lines(name, f'route="{_esc(route)}"'))
        out.append("# TYPE hitch_gateway_queue_seconds histogram")
        out.extend(self.queue.lines("hitch_gateway_queue_seconds", ""))
        gauges = self.queue_gauges()
        for metric, idx, kind in (
            ("hitch_gateway_permits_in_use", 1, "gauge"),
            ("hitch_gateway_queue_waiting", 2, "gauge"),
            ("hitch_gateway_permits_acquired_total", 3, "counter"),
            ("hitch_gateway_permits_released_total", 4, "counter"),
            ("hitch_gateway_permit_repeat_releases_total", 5, "counter"),
            # abandoned requests whose permit waits for the engine to show their slot free (spec §9.2)
            ("hitch_gateway_aborts_confirming", 6, "gauge"),
        ):
            out.append(f"# TYPE {metric} {kind}")
            for row in gauges:
                out.append(f'{metric}{{service="{_esc(row[0])}"}} {row[idx]}')
        return "\n".join(out) + "\n"


def build_metrics_app(metrics: GatewayMetrics) -> web.Application:
    async def handler(_: web.Request) -> web.Response:
        return web.Response(body=metrics.render().encode(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    app = web.Application()
    app.router.add_get("/metrics", handler)
    return app
