"""Sampling a user chooses: ``--generation NAME|FILE`` sets a lock's sampling, the gateway then accepts requests
with that sampling and refuses any other; a bad profile exits 2 with its code before anything starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.app.requests import RunRequest
from harness.app.run_identity import run_identity
from harness.contracts.lock import InferenceLockV1
from harness.errors import HitchError
from harness.lock import DEFAULT_GENERATION, GENERATION_PROFILES, generation_profile, validate_lock
from harness.paths import HitchRoot
from tests.gateway.support import Engine, GatewayThread, target_for, token_of
from tests.harness.cli.cli_support import error_json, hitch, nothing_started, ok_json

TINY = "local/tiny"
RUN = ("run", "--harness", "model-call", "--prompt", "x")


def _lock(root: Path, out: Path, *generation: str) -> dict[str, Any]:
    """``hitch local lock local/tiny --device cpu [--generation X] --out OUT --json``: its payload."""
    return ok_json(hitch(root, "local", "lock", TINY, "--device", "cpu", *generation, "--out", str(out), "--json"))


def _chat(rec: Any, token: str, **extra: Any) -> httpx.Response:
    body = {"model": "tiny-wire", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra}
    return httpx.post(rec.base_url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def _serves_only_its_sampling(engine: Engine, gateway: GatewayThread, lock: InferenceLockV1, temperature: float) -> None:
    rec = gateway.register("run-gen", target_for(engine, lock))
    token = token_of(rec)
    assert _chat(rec, token, temperature=temperature).status_code == 200
    assert _chat(rec, token).status_code == 200  # omitted: the lock's value is sent
    refused = _chat(rec, token, temperature=0)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "inference_parameter_conflict"
    assert len(engine.posts()) == 2  # the conflicting request never reached the engine


@pytest.mark.integration
def test_a_named_profile_makes_a_lock_whose_temperature_the_gateway_accepts_and_no_other(
    tiny_root: Path, tmp_path: Path, engine: Engine, gateway: GatewayThread
) -> None:
    default = _lock(tiny_root, tmp_path / "default.json")
    assert default["generation_profile"] == {"name": "greedy", "version": "1", "source": "built-in"}
    payload = _lock(tiny_root, tmp_path / "lock.json", "--generation", "balanced")
    assert payload["generation_profile"] == {"name": "balanced", "version": "1", "source": "built-in"}
    lock = validate_lock(json.loads((tmp_path / "lock.json").read_text()))
    assert (lock.generation.temperature, lock.generation.top_p) == (0.7, 0.95)
    assert lock.inference_id == payload["inference_id"] != default["inference_id"]  # sampling is part of the identity
    human = hitch(tiny_root, "local", "lock", TINY, "--device", "cpu", "--generation", "balanced")
    assert "sampling:     balanced v1: sampled (temperature 0.7), top_p 0.95" in human.stdout
    _serves_only_its_sampling(engine, gateway, lock, 0.7)


@pytest.mark.integration
def test_a_profile_file_makes_a_lock_whose_temperature_the_gateway_accepts_and_no_other(
    tiny_root: Path, tmp_path: Path, engine: Engine, gateway: GatewayThread
) -> None:
    profile = tmp_path / "warm.json"
    profile.write_text(json.dumps({"temperature": 0.3, "top_k": 40, "seed": 7}))
    payload = _lock(tiny_root, tmp_path / "lock.json", "--generation", str(profile))
    assert payload["generation_profile"]["source"] == "file" and payload["generation_profile"]["name"] == str(profile)
    assert payload["generation_profile"]["version"].startswith("sha256:")
    gen = validate_lock(json.loads((tmp_path / "lock.json").read_text())).generation
    # what the file leaves out keeps greedy's value
    assert (gen.temperature, gen.top_k, gen.seed, gen.top_p, gen.min_p) == (0.3, 40, 7, 1.0, 0.0)
    _serves_only_its_sampling(engine, gateway, validate_lock(payload["lock"]), 0.3)


def test_greedy_is_the_default_and_keeps_every_lock_id(tiny_root: Path, tmp_path: Path) -> None:
    default = _lock(tiny_root, tmp_path / "a.json")
    greedy = _lock(tiny_root, tmp_path / "b.json", "--generation", "greedy")
    assert greedy["inference_id"] == default["inference_id"]
    assert default["lock"]["generation"]["temperature"] == 0.0


_FILES: dict[str, str] = {
    "not-json.json": "{temperature: 0.7",
    "list.json": "[0.7]",
    "unknown-key.json": json.dumps({"temperature": 0.7, "temprature": 0.7}),
    "budget.json": json.dumps({"max_output_tokens": 64}),
    "negative.json": json.dumps({"temperature": -1}),
    "string.json": json.dumps({"temperature": "0.7"}),
    "top-p-zero.json": json.dumps({"top_p": 0}),
    "bool-seed.json": json.dumps({"seed": True}),
}

# (command, --generation value (FILE: a file of _FILES), exit code, error code, did-you-mean)
BAD_GENERATION: list[tuple[tuple[str, ...], str, int, str, str | None]] = [
    (("local", "lock", TINY), "greddy", 2, "usage_error", "greedy"),
    (("local", "lock", TINY), "warm", 2, "usage_error", None),
    (("local", "lock", TINY), "missing.json", 2, "usage_error", None),
    (("local", "lock", TINY), "FILE:not-json.json", 2, "generation_profile_invalid", None),
    (("local", "lock", TINY), "FILE:list.json", 2, "generation_profile_invalid", None),
    (("local", "lock", TINY), "FILE:unknown-key.json", 2, "generation_profile_invalid", None),
    (("local", "lock", TINY), "FILE:budget.json", 2, "generation_profile_invalid", None),
    (("local", "lock", TINY), "FILE:negative.json", 2, "generation_profile_invalid", None),
    (("local", "lock", TINY), "FILE:string.json", 2, "generation_profile_invalid", None),
    (("local", "lock", TINY), "FILE:top-p-zero.json", 2, "generation_profile_invalid", None),
    (("local", "lock", TINY), "FILE:bool-seed.json", 2, "generation_profile_invalid", None),
    (("local", "prepare", TINY, "--engine", "fake"), "balancd", 2, "usage_error", "balanced"),
    (("local", "prepare", TINY, "--engine", "fake"), "FILE:negative.json", 2, "generation_profile_invalid", None),
    (("local", "serve", TINY, "--engine", "fake"), "creativ", 2, "usage_error", "creative"),
    (("local", "serve", TINY, "--engine", "fake"), "no/such/profile.json", 2, "usage_error", None),
    ((*RUN, "--model", TINY, "--engine", "fake"), "greddy", 2, "usage_error", "greedy"),
    ((*RUN, "--inference", "sha256:" + "0" * 64), "balanced", 2, "usage_error", None),
]


@pytest.mark.parametrize(("argv", "value", "exit_code", "code", "did_you_mean"), BAD_GENERATION, ids=lambda v: str(v))
def test_a_bad_generation_exits_2_with_its_code_and_starts_nothing(
    tiny_root: Path, tmp_path: Path, argv: tuple[str, ...], value: str, exit_code: int, code: str, did_you_mean: str | None
) -> None:
    if value.startswith("FILE:"):
        name = value.removeprefix("FILE:")
        (tmp_path / name).write_text(_FILES[name])
        value = str(tmp_path / name)
    err = error_json(hitch(tiny_root, *argv, "--generation", value, "--json"), exit_code)
    assert err["code"] == code and err["category"] == "input"
    assert "--generation" in err["message"] or err["message"] == f"no such file: {value}"
    assert "SamplingV1" not in err["message"] and "GenerationProfile" not in err["message"]
    if did_you_mean is not None:
        assert f"did you mean {did_you_mean}" in err["message"]
    nothing_started(tiny_root)


def test_a_profile_files_problems_name_the_keys_as_written(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"temperature": -1, "top_p": 2}))
    with pytest.raises(HitchError) as info:
        generation_profile(str(path))
    assert info.value.code == "generation_profile_invalid"
    assert [p.split(":")[0] for p in info.value.details["problems"]] == ["temperature", "top_p"]


def test_the_built_in_profiles_are_versioned_and_greedy_is_the_spec_default() -> None:
    assert DEFAULT_GENERATION is GENERATION_PROFILES["greedy"] and DEFAULT_GENERATION.sampling.greedy
    assert all(p.version and p.source == "built-in" for p in GENERATION_PROFILES.values())
    assert not GENERATION_PROFILES["balanced"].sampling.greedy


def test_a_runs_generation_is_part_of_its_identity_and_never_beside_a_sealed_lock(tmp_path: Path) -> None:
    base = {"model": "local/sha256:" + "1" * 64, "runtime": "r", "harness": "model-call"}
    root = HitchRoot(tmp_path)
    plain = run_identity(root, RunRequest.model_validate(base))
    balanced = GENERATION_PROFILES["balanced"].sampling.to_json_dict()
    sampled = run_identity(root, RunRequest.model_validate({**base, "generation": balanced}))
    assert plain.digest != sampled.digest and plain.fields["lock"] != sampled.fields["lock"]
    with pytest.raises(ValueError, match="fixes its sampling"):
        RunRequest.model_validate({"inference_id": "sha256:" + "0" * 64, "generation": balanced})
