"""The gateway's exact context count is the prompt real SGLang 0.5.23 builds (spec §10.2: exact, never estimated).

The corpus and the comparison live in certify/kit/prompt_cases.py (also the certification check
``protocol.context.exact``); here they run against the parity suite's real SGLang on the tiny checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from certify.kit.prompt_cases import CASES, prompt_counts
from fixtures.engine_process import EngineProcess
from tests.gateway.support import make_lock
from tests.parity.conftest import SGLANG

pytestmark = SGLANG

LOCK = make_lock(context=2048, max_output=64)


@pytest.mark.parametrize("case", sorted(CASES))
def test_gateway_counts_the_prompt_sglang_builds(sglang_engine: EngineProcess, parity_checkpoint: Path, case: str) -> None:
    headers = {"Authorization": f"Bearer {sglang_engine.api_key}"}
    ours, engine = prompt_counts(sglang_engine.base, headers, sglang_engine.served, parity_checkpoint, LOCK, case)
    assert ours == engine
