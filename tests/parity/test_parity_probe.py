"""Parity of prepare's probe start (no ``--max-total-tokens``: the engine sizes its pool from the memory
budget): the fake and real SGLang report the same shape in ``/server_info`` — the pool argument unset, the
effective pool ``max_total_num_tokens`` and the resolved prefill sizes and backends as values that
``harness/engine/probe.py`` reads and seals. The pool itself is the machine's (real) or the fake's model of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fixtures.engine_process import EngineProcess
from fixtures.fake_sglang.parity_engines import fake_command, launch_engine
from harness.engine.probe import probed_values, seal_probed
from tests.harness.service.manager_fakes import make_lock
from tests.parity.conftest import ADMIN_KEY, API_KEY, ENGINES, REAL_READY_TIMEOUT_S, require_sglang

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("sglang")]


@pytest.fixture(scope="module", params=ENGINES)
def probe_engine(
    request: pytest.FixtureRequest, parity_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EngineProcess]:
    real = request.param == "sglang"
    command = require_sglang() if real else fake_command()
    engine = launch_engine(
        command,
        parity_checkpoint,
        tmp_path_factory.mktemp(f"{request.param}-probe-logs"),
        API_KEY,
        ADMIN_KEY,
        ready_timeout_s=REAL_READY_TIMEOUT_S if real else 30.0,
        without=("--max-total-tokens",),
    )
    try:
        yield engine
    finally:
        engine.stop()


def test_the_probe_start_reports_what_the_engine_chose(probe_engine: EngineProcess) -> None:
    info = httpx.get(probe_engine.base + "/server_info", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30).json()
    assert info["max_total_tokens"] is None  # not passed: the engine chose
    assert info["mem_fraction_static"] == 0.05 and info["context_length"] == 2048
    assert info["max_prefill_tokens"] == 16384  # SGLang's default when not passed
    chosen = probed_values(info)
    assert chosen["max_total_tokens"] >= 2048 and chosen["chunked_prefill_size"] in (2048, 4096, 8192, 16384)
    assert (chosen["attention_backend"], chosen["sampling_backend"]) == ("torch_native", "pytorch")
    assert info["internal_states"][0]["memory_usage"]["token_capacity"] == info["max_total_num_tokens"]
    sealed = seal_probed(make_lock(context=2048), chosen)
    assert 2048 <= sealed.execution.max_total_tokens < chosen["max_total_tokens"]
