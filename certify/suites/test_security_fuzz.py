"""security (fuzz): the session's gateway, in front of the session's engine, under hostile request bodies.

A bounded, seeded run of :mod:`certify.hostile_bodies` (mutated chat and Responses bodies, byte garbage,
nesting bombs, huge fields, wrong media types) through the run's base URL: every answer is below 500 and
an error body when not 200 (ours, or the engine's own 4xx relayed), no connection is dropped, a valid chat
and Responses request succeed afterwards, and the daemon hosting the gateway grows by at most 50 MB of RSS
across the run. The counts per
kind and status, the seed and the RSS figures are recorded. On real SGLang fewer cases run (the engine
generates for every case the gateway forwards), with the same seed.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import httpx
import psutil
import pytest

from certify.hostile_bodies import KINDS, hostile_case, valid_body
from certify.registry import check
from certify.session import CertifyEnv
from harness.paths import DaemonPaths

SEED = 19
CASES = {"fake": 400, "sglang": 300}
MAX_RSS_GROWTH_MB = 50


def _refusal(r: httpx.Response) -> bool:
    """Our error body, or the engine's own 4xx refusal relayed as it is (SGLang's flat or nested error: a
    check the gateway leaves to the engine, such as a tool's JSON-schema validity)."""
    try:
        body = r.json()
    except ValueError:
        return False
    if not isinstance(body, dict):
        return False
    err = body.get("error")
    if isinstance(err, dict):
        return isinstance(err.get("code"), str | int) and isinstance(err.get("message"), str)
    return body.get("object") == "error" and isinstance(body.get("message"), str)


def _daemon_rss_mb(env: CertifyEnv) -> float:
    info = json.loads(DaemonPaths(env.root).info.read_text())
    return float(psutil.Process(int(info["pid"])).memory_info().rss) / (1 << 20)


@pytest.mark.exclusive_engine
@check(
    "security.fuzz.gateway",
    description="seeded hostile bodies through the gateway: no 5xx, no dropped connection, valid requests "
    "still served, daemon RSS within +50 MB",
    summary=lambda d: (
        f"{sum(d['counts'].values())} seeded hostile bodies (seed {d['seed']}): no 5xx, no dropped "
        "connection, every refusal valid"
    ),
)
def test_hostile_bodies(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    n = CASES.get(certify_env.engine, CASES["sglang"])
    rng = random.Random(SEED)
    counts: Counter[str] = Counter()
    server_errors: list[str] = []
    dropped: list[str] = []
    rss_before = _daemon_rss_mb(certify_env)
    with httpx.Client(base_url=run.base_url, headers=run.headers(), timeout=300) as client:
        for i in range(n):
            case = hostile_case(rng, run.wire_model, max_tokens=2, kind=KINDS[i % len(KINDS)])
            try:
                r = client.post(case.route, content=case.body, headers={"Content-Type": case.content_type})
            except httpx.TransportError as exc:
                dropped.append(f"#{i} {case.kind} {case.route}: {exc!r}")
                continue
            counts[f"{case.kind}:{r.status_code}"] += 1
            if r.status_code >= 500:
                server_errors.append(f"#{i} {case.kind} {case.route}: {r.status_code} {r.text[:200]}")
            elif r.status_code != 200 and not _refusal(r):
                server_errors.append(f"#{i} {case.kind}: {r.status_code} is not an error body: {r.text[:200]}")
        valid = {
            route: client.post(route, json=valid_body(route, run.wire_model, 2)).status_code
            for route in ("/chat/completions", "/responses")
        }
    rss_after = _daemon_rss_mb(certify_env)
    certify_record.detail("seed", SEED)
    certify_record.detail("counts", dict(sorted(counts.items())))
    certify_record.metric("fuzz_requests", n)
    certify_record.metric("fuzz_5xx", len(server_errors))
    certify_record.metric("fuzz_dropped", len(dropped))
    certify_record.metric("daemon_rss_before_mb", round(rss_before, 1))
    certify_record.metric("daemon_rss_after_mb", round(rss_after, 1))
    assert not server_errors, server_errors[:10]
    assert not dropped, dropped[:10]
    assert valid == {"/chat/completions": 200, "/responses": 200}, valid
    assert rss_after - rss_before <= MAX_RSS_GROWTH_MB, (rss_before, rss_after)
