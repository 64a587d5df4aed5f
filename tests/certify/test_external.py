"""Stock ``sglang.bench_serving`` and AIPerf through a gateway with a benchmark lock, beside the engine itself (fake engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from certify.external import STRIPPED, main
from tests.components import installed_sglang, missing

pytestmark = [pytest.mark.integration, pytest.mark.needs_sglang, pytest.mark.slow]


@pytest.mark.parametrize("disable_ignore_eos", [False, True], ids=["ignore_eos", "disable-ignore-eos"])
def test_stock_bench_serving_completes_through_the_gateway_with_no_errors(
    tiny_model: Path, tmp_path: Path, disable_ignore_eos: bool
) -> None:
    installed_sglang()  # the tool runs from the runtime's own venv
    out = tmp_path / "out"
    argv = ["--rounds", "1", "--num-prompts", "4", "--input-len", "8", "--output-len", "4", "--model-dir", str(tiny_model),
            "--out", str(out)]  # fmt: skip
    if disable_ignore_eos:
        argv.append("--disable-ignore-eos")
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tool_args"]["ignore_eos"] is (not disable_ignore_eos)
    for arm in ("direct", "gateway"):
        figures = summary["arms"][arm]
        assert (figures["completed"], figures["errors"]) == (4, 0), arm
        assert figures["ttft_ms"]["p50"] is not None and figures["e2e_ms"]["p99"] is not None
        [row] = [json.loads(line) for line in (out / f"{arm}_round1.jsonl").read_text().splitlines()]
        assert row["server_info"] == STRIPPED  # SGLang's /server_info echoes the engine's keys
        assert row["completed"] == 4 and not any(row["errors"])
    assert summary["gateway_vs_direct"]["req_per_s"] is not None


def test_stock_aiperf_completes_through_the_gateway_with_no_errors(tiny_model: Path, tmp_path: Path) -> None:
    from certify.aiperf import AIPERF_VERSION, installed_aiperf

    if installed_aiperf() is None:
        missing("aiperf", f"AIPerf {AIPERF_VERSION} is not installed under HITCH_ROOT/tools (make aiperf)")
    out = tmp_path / "out"
    # the fake engine and few requests: AIPerf's timing process keeps a core busy (see certify.aiperf)
    argv = ["--tool", "aiperf", "--rounds", "1", "--num-prompts", "4", "--input-len", "8", "--output-len", "4",
            "--model-dir", str(tiny_model), "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    for arm in ("direct", "gateway"):
        figures = summary["arms"][arm]
        assert (figures["completed"], figures["errors"]) == (4, 0), arm
        assert figures["ttft_ms"]["p50"] is not None and figures["e2e_ms"]["p99"] is not None
        assert (out / f"{arm}_round1" / "profile_export_aiperf.json").exists()
    assert summary["gateway_vs_direct"]["req_per_s"] is not None
