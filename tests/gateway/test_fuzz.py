"""Property-based fuzzing of a real gateway on the fake engine: hostile bodies never get a 5xx,
never drop the connection, never leave a traceback in the engine's log, and a valid request still succeeds.

The bodies come from :mod:`certify.hostile_bodies` (the generator the certification check
``security.fuzz.gateway`` runs too); hypothesis drives its ``Random``. Derandomized with a fixed example
count, so a run is the same every time and takes seconds.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from certify.hostile_bodies import KINDS, hostile_case, valid_body
from tests.gateway.support import Engine, GatewayThread, make_lock, target_for, token_of

pytestmark = pytest.mark.integration

EXAMPLES = 150


def test_hostile_bodies_get_no_5xx_and_no_dropped_connection(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-fuzz", target_for(engine, make_lock(context=4096, max_output=8)))
    headers = {"Authorization": f"Bearer {token_of(rec)}"}
    statuses: Counter[tuple[str, int]] = Counter()
    with httpx.Client(base_url=rec.base_url, headers=headers, timeout=60) as client:

        @settings(
            max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )  # fmt: skip
        @given(rng=st.randoms(use_true_random=False), kind=st.sampled_from(KINDS))
        def one(rng: random.Random, kind: str) -> None:
            case = hostile_case(rng, engine.served, kind=kind)
            try:
                r = client.post(case.route, content=case.body, headers={"Content-Type": case.content_type})
            except httpx.TransportError as exc:  # a reset or a closed connection
                raise AssertionError(f"{case.kind} {case.route}: the connection dropped: {exc!r}") from exc
            statuses[(case.kind, r.status_code)] += 1
            assert r.status_code < 500, (case.kind, case.route, case.body[:300], r.text[:500])
            if r.status_code != 200:
                err: Any = r.json()["error"]
                assert isinstance(err["code"], str) and isinstance(err["message"], str), r.text[:300]

        one()
        for route in ("/chat/completions", "/responses"):
            ok = client.post(route, json=valid_body(route, engine.served))
            assert ok.status_code == 200, ok.text
    assert sum(statuses.values()) >= EXAMPLES
    assert {kind for kind, _ in statuses} == set(KINDS)
    assert "Traceback" not in engine.log.read_text(errors="replace")
