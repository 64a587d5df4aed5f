"""Certify certifies what the lock says: the checks that need greedy decoding (determinism, parity, natural stop,
the question set, the recorded continuations) apply to greedy locks; on a lock that samples each is
``not_applicable`` with the reason (:func:`certify.kit.correctness.greedy_only`), and the checks that asked for
temperature 0 through the gateway (refused by a sampled lock) send the lock's own sampling instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from certify.kit.correctness import greedy_only
from harness.lock import GENERATION_PROFILES
from tests.certify.test_certify_run import run_certify
from tests.gateway.support import make_lock


def test_a_greedy_lock_is_held_to_identical_tokens() -> None:
    assert greedy_only(make_lock().generation, "identical requests may differ") is None
    assert greedy_only(GENERATION_PROFILES["greedy"].sampling, "identical requests may differ") is None


def test_a_sampled_lock_is_not_applicable_and_says_why() -> None:
    reason = greedy_only(GENERATION_PROFILES["balanced"].sampling, "identical requests may differ")
    assert reason is not None
    assert "temperature 0.7" in reason and "greedy locks only" in reason and "identical requests may differ" in reason


# the checks that sent temperature 0 through the gateway, on the fake engine (the sglang-only correctness checks,
# determinism among them, are skipped there: tests/certify/test_correctness_compare.py covers their logic)
_SELECTED = "continuations_recorded or tools_forced or flip_token or response_model or determinism"


def _checks(tmp_path: Path, *args: str) -> tuple[dict[str, dict[str, Any]], str]:
    proc, out, _ = run_certify(tmp_path, "-k", _SELECTED, *args)
    results = json.loads((out / "results.json").read_text())
    return {c["id"]: c for c in results["checks"]}, (proc.stdout + proc.stderr)[-4000:]


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.xdist_group("certify")
def test_a_sampled_lock_session_records_the_greedy_checks_not_applicable_and_the_greedy_one_runs_them(
    tmp_path: Path,
) -> None:
    sampled, tail = _checks(tmp_path / "sampled", "--generation", "balanced")
    cont = sampled["correctness.continuations"]
    assert cont["status"] == "not_applicable", (cont, tail)
    reason = cont["details"]["not_applicable"]
    assert "temperature 0.7" in reason and "greedy locks only" in reason, reason
    forced = sampled["protocol.tools.forced"]  # the lock's temperature is sent: accepted, the calls still checked
    assert forced["status"] == "passed", (forced, tail)
    assert "greedy locks only" in forced["details"]["engine_comparison"], forced
    for cid in ("faults.flip_token.reproduction_differs", "faults.response_model.identity_kept"):
        assert sampled[cid]["status"] == "passed", (sampled[cid], tail)  # the fake decodes alike at any temperature
    assert sampled["correctness.determinism"]["status"] == "skipped"  # real SGLang only

    greedy, tail = _checks(tmp_path / "greedy")
    cont = greedy["correctness.continuations"]
    assert cont["status"] == "passed" and "not_applicable" not in cont["details"], (cont, tail)
    assert len(cont["details"]["continuations"]) == 16
    forced = greedy["protocol.tools.forced"]
    assert forced["status"] == "passed" and "engine_comparison" not in forced["details"], (forced, tail)
    for cid in ("faults.flip_token.reproduction_differs", "faults.response_model.identity_kept"):
        assert greedy[cid]["status"] == "passed", (greedy[cid], tail)


def test_generation_and_inference_together_are_a_usage_error(tmp_path: Path) -> None:
    proc, _, _ = run_certify(tmp_path, "--generation", "balanced", "--inference", "sha256:" + "0" * 64, harbor_link=False)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error
    assert "--inference pins the lock's sampling; drop --generation" in proc.stderr
