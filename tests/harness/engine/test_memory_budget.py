"""A sealed CPU start's memory budget: the fraction that holds the sealed pool in what is free now, never below the
lock's own, refused with what is missing when the machine has not the memory (harness/engine/memory_budget.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.engine import EngineProgram, prepare_launch
from harness.engine.memory_budget import ENGINE_BASE_BYTES, MAX_FRACTION, kv_bytes_per_token, start_fraction
from harness.errors import HitchError
from tests.harness.engine.inputs import ServiceInputs

_GIB = 1 << 30


def _need(inputs: ServiceInputs) -> int:
    lock, model = inputs.lock, inputs.model_dir
    weights = sum(p.stat().st_size for p in model.glob("*.safetensors"))
    return lock.execution.max_total_tokens * kv_bytes_per_token(model, lock.execution.dtype) + weights


def test_a_quiet_machine_keeps_the_locks_fraction_and_a_busy_one_gets_the_pools_bytes(inputs: ServiceInputs) -> None:
    floor = inputs.lock.execution.platform.mem_fraction_static  # type: ignore[union-attr]
    assert start_fraction(inputs.lock, inputs.model_dir, 64 * _GIB) == floor
    tight = ENGINE_BASE_BYTES + 2 * _need(inputs) + _GIB // 2  # what another engine left free
    fraction = start_fraction(inputs.lock, inputs.model_dir, tight)
    assert floor < fraction <= MAX_FRACTION
    assert fraction * (tight - ENGINE_BASE_BYTES) >= _need(inputs)  # SGLang's budget holds the pool and the weights
    # split over NUMA nodes as SGLang splits what is free: two nodes need twice the fraction of the same total
    assert start_fraction(inputs.lock, inputs.model_dir, 2 * tight, numa_nodes=2) == fraction


def test_a_machine_without_the_memory_refuses_the_start_naming_what_is_missing(inputs: ServiceInputs) -> None:
    with pytest.raises(HitchError) as caught:
        start_fraction(inputs.lock, inputs.model_dir, ENGINE_BASE_BYTES + _need(inputs) // 2)
    assert caught.value.code == "inference_capacity_exceeded"
    assert caught.value.details["max_total_tokens"] == inputs.lock.execution.max_total_tokens
    assert caught.value.details["needed_bytes"] > _need(inputs)
    assert "MiB free now" in caught.value.message


def test_the_kv_bytes_follow_the_checkpoints_kv_heads(tmp_path: Path) -> None:
    config = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert kv_bytes_per_token(tmp_path, "bfloat16") == 2 * 30 * 3 * 64 * 2  # SmolLM2-135M: GQA, head_dim 64
    assert kv_bytes_per_token(tmp_path, "float32") == 2 * 30 * 3 * 64 * 4


def test_a_sealed_start_passes_and_expects_the_same_budget(inputs: ServiceInputs) -> None:
    program = EngineProgram(kind="fake", argv=("engine",))
    launch = prepare_launch(inputs.root, inputs.lock, inputs.model_dir, program, service_id="svc-b", epoch=1, port=4000)
    argv = launch.spec.argv
    passed = float(argv[argv.index("--mem-fraction-static") + 1])
    assert passed >= inputs.lock.execution.platform.mem_fraction_static  # type: ignore[union-attr]
    assert launch.expected["mem_fraction_static"] == passed
    probe = prepare_launch(
        inputs.root, inputs.lock, inputs.model_dir, program, service_id="svc-b", epoch=2, port=4000, probe=True
    )
    assert probe.expected["mem_fraction_static"] == inputs.lock.execution.platform.mem_fraction_static  # type: ignore[union-attr]
