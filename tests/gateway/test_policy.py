"""The lock decides sampling, budget, parameters and modality (unit tests of gateway.policy)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.policy import apply_policy
from harness.errors import HitchError
from tests.gateway.support import make_lock

LOCK = make_lock(max_output=256)
CHAT = "/v1/chat/completions"
RESP = "/v1/responses"


def _chat(**extra: Any) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}).encode()


def _resp(**extra: Any) -> bytes:
    return json.dumps({"model": "m", "input": "hi", **extra}).encode()


def _code(route: str, raw: bytes) -> str:
    with pytest.raises(HitchError) as info:
        apply_policy(route, raw, LOCK, "m")  # type: ignore[arg-type]
    return info.value.code


def test_lock_sampling_is_applied_and_top_k_zero_becomes_minus_one() -> None:
    p = apply_policy(CHAT, _chat(), LOCK, "m")
    body = json.loads(p.body)
    assert (body["temperature"], body["top_p"], body["top_k"], body["min_p"], body["repetition_penalty"], body["seed"]) == (
        0.0, 1.0, -1, 0.0, 1.0, 0,
    )  # fmt: skip
    assert body["max_completion_tokens"] == 256 and p.max_output_tokens == 256
    for top_k in (0, -1):
        assert json.loads(apply_policy(CHAT, _chat(top_k=top_k), LOCK, "m").body)["top_k"] == -1


def test_top_k_maps_through_when_the_lock_sets_one() -> None:
    lock = make_lock(top_k=40)
    assert json.loads(apply_policy(RESP, _resp(top_k=40), lock, "m").body)["top_k"] == 40
    with pytest.raises(HitchError) as info:
        apply_policy(RESP, _resp(top_k=-1), lock, "m")
    assert info.value.code == "inference_parameter_conflict"


@pytest.mark.parametrize(
    "extra",
    [{"temperature": 0.7}, {"top_p": 0.9}, {"top_k": 5}, {"min_p": 0.1}, {"repetition_penalty": 1.1}, {"seed": 7},
     {"frequency_penalty": 0.5}, {"presence_penalty": 1}, {"temperature": True}, {"n": 2}],
)  # fmt: skip
def test_conflicting_values_are_refused(extra: dict[str, Any]) -> None:
    assert _code(CHAT, _chat(**extra)) == "inference_parameter_conflict"


def test_equal_values_are_accepted_unchanged() -> None:
    raw = _chat(temperature=0, top_p=1, top_k=-1, min_p=0, repetition_penalty=1, seed=0, max_tokens=3)
    p = apply_policy(CHAT, raw, LOCK, "m")
    assert p.body == raw  # nothing to change: the caller's bytes go through as they are
    assert p.max_output_tokens == 3


def test_budget_may_only_shrink() -> None:
    assert _code(CHAT, _chat(max_tokens=257)) == "inference_parameter_conflict"
    assert _code(RESP, _resp(max_output_tokens=257)) == "inference_parameter_conflict"
    assert _code(CHAT, _chat(max_tokens=0)) == "inference_parameter_conflict"
    assert _code(CHAT, _chat(max_tokens=3, max_completion_tokens=4)) == "inference_parameter_conflict"
    assert apply_policy(CHAT, _chat(max_completion_tokens=10), LOCK, "m").max_output_tokens == 10


def test_responses_budget_is_compensated_for_the_engine_minus_two() -> None:
    p = apply_policy(RESP, _resp(max_output_tokens=10), LOCK, "m")
    assert json.loads(p.body)["max_output_tokens"] == 12 and p.max_output_tokens == 10
    p = apply_policy(RESP, _resp(), LOCK, "m")
    assert json.loads(p.body)["max_output_tokens"] == 258 and p.max_output_tokens == 256
    assert json.loads(p.body)["store"] is False


@pytest.mark.parametrize(
    ("route", "raw"),
    [
        (CHAT, _chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}])),
        (
            CHAT,
            _chat(
                messages=[{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]
            ),
        ),
        (CHAT, _chat(modalities=["text", "audio"])),
        (RESP, _resp(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/a.png"}]}])),
        (RESP, _resp(input=[{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}])),
    ],
)
def test_images_audio_and_files_are_refused(route: str, raw: bytes) -> None:
    assert _code(route, raw) == "inference_modality_unsupported"


@pytest.mark.parametrize(
    ("route", "raw"),
    [
        (CHAT, _chat(logit_bias={"1": 5})),
        (CHAT, _chat(functions=[{"name": "f"}])),
        (CHAT, _chat(store=True)),
        (RESP, _resp(previous_response_id="resp_1")),
        (RESP, _resp(store=True)),
        (RESP, _resp(background=True)),
        (RESP, _resp(truncation="auto")),
        (RESP, _resp(tools=[{"type": "web_search"}])),
        (RESP, _resp(some_new_field=1)),
        (CHAT, _chat(model="other")),
        (CHAT, _chat(stream="yes")),
    ],
)
def test_unsupported_parameters_are_refused_never_dropped(route: str, raw: bytes) -> None:
    assert _code(route, raw) == "inference_parameter_conflict"


def test_function_tools_pass_and_parallel_calls_follow_the_lock() -> None:
    tool = {"type": "function", "name": "ls", "parameters": {"type": "object", "properties": {}}}
    assert LOCK.protocol.parallel_tool_calls is True  # its parser (hermes) hands back every call of an answer
    p = apply_policy(RESP, _resp(tools=[tool]), LOCK, "m")
    assert json.loads(p.body)["parallel_tool_calls"] is True  # absent: the lock's value is sent
    # the template sees SGLang's Tool.model_dump() of the Responses tool (description null, strict false)
    function = {"name": "ls", "description": None, "parameters": {"type": "object", "properties": {}}, "strict": False}
    assert p.tools == [{"type": "function", "function": function, "defer_loading": None}]
    same = apply_policy(RESP, _resp(tools=[tool], parallel_tool_calls=True), LOCK, "m")
    assert json.loads(same.body)["parallel_tool_calls"] is True


@pytest.mark.parametrize("route", [CHAT, RESP])
def test_a_parallel_tool_calls_value_other_than_the_locks_is_a_conflict_never_changed(route: str) -> None:
    tool = {"type": "function", "name": "ls", "parameters": {"type": "object", "properties": {}}}
    tools = [tool] if route == RESP else [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
    body = (_resp if route == RESP else _chat)(tools=tools, parallel_tool_calls=False)
    with pytest.raises(HitchError) as info:
        apply_policy(route, body, LOCK, "m")  # type: ignore[arg-type]
    assert (info.value.code, info.value.details["parameter"], info.value.details["lock_value"]) == (
        "inference_parameter_conflict", "parallel_tool_calls", True,
    )  # fmt: skip
    single = LOCK.model_copy(update={"protocol": LOCK.protocol.model_copy(update={"parallel_tool_calls": False})})
    body = (_resp if route == RESP else _chat)(tools=tools, parallel_tool_calls=True)
    with pytest.raises(HitchError) as info:
        apply_policy(route, body, single, "m")  # type: ignore[arg-type]
    assert (info.value.code, info.value.details["lock_value"]) == ("inference_parameter_conflict", False)
    absent = apply_policy(route, (_resp if route == RESP else _chat)(tools=tools), single, "m")  # type: ignore[arg-type]
    assert json.loads(absent.body)["parallel_tool_calls"] is False


def test_client_metadata_is_stripped_before_the_engine() -> None:
    p = apply_policy(RESP, _resp(client_metadata={"turn_id": "t"}), LOCK, "m")
    assert "client_metadata" not in json.loads(p.body)


def test_bodies_that_are_not_objects_are_refused() -> None:
    for raw in (b"", b"[]", b"not json", b'"x"'):
        assert _code(CHAT, raw) == "inference_protocol_unsupported"


def _pairs_no_duplicates(raw: bytes) -> dict[str, Any]:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), keys
        return dict(pairs)

    parsed: dict[str, Any] = json.loads(raw, object_pairs_hook=hook)
    return parsed


def test_additions_are_spliced_into_the_callers_bytes() -> None:
    raw = b'{"model": "m",  "messages": [{"role": "user", "content": "h\\u00e9 \xc3\xa9"}], "max_tokens": 9}\n'
    body = apply_policy(CHAT, raw, LOCK, "m").body
    assert body.startswith(raw.rstrip()[:-1] + b",")  # the caller's bytes, untouched, then the lock's fields
    parsed = _pairs_no_duplicates(body)
    assert parsed["messages"][0]["content"] == "hé é" and parsed["max_tokens"] == 9 and parsed["top_k"] == -1


def test_a_replaced_value_reserializes_without_duplicate_keys() -> None:
    for route, raw in ((CHAT, _chat(top_k=0)), (RESP, _resp(max_output_tokens=5))):
        body = apply_policy(route, raw, LOCK, "m").body  # type: ignore[arg-type]
        parsed = _pairs_no_duplicates(body)
        assert parsed.get("top_k", -1) == -1 and parsed.get("max_output_tokens", 7) == 7


def test_a_body_the_lock_does_not_change_is_forwarded_as_is() -> None:
    full = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0, "seed": 0, "max_tokens": 5}
    raw = _chat(**full)
    assert apply_policy(CHAT, raw, LOCK, "m").body is raw


def test_a_body_that_is_not_plain_utf8_is_reserialized() -> None:
    raw = b"\xef\xbb\xbf" + _chat()
    body = apply_policy(CHAT, raw, LOCK, "m").body
    assert body.startswith(b"{") and _pairs_no_duplicates(body)["top_k"] == -1


BENCH = make_lock(max_output=256, benchmark=True)


@pytest.mark.parametrize("extra", [{"ignore_eos": False}, {"min_tokens": 0}, {"ignore_eos": False, "min_tokens": 0}])
def test_benchmark_controls_at_sglangs_default_always_pass(extra: dict[str, Any]) -> None:
    """bench_serving --disable-ignore-eos sends ignore_eos=false: it asks for nothing the engine would not do."""
    raw = _chat(**extra)
    p = apply_policy(CHAT, raw, LOCK, "m")
    assert p.benchmark_controls is None
    body = json.loads(p.body)
    assert {k: body[k] for k in extra} == extra  # forwarded as sent


@pytest.mark.parametrize("extra", [{"ignore_eos": True}, {"min_tokens": 8}])
def test_benchmark_controls_need_a_benchmark_lock(extra: dict[str, Any]) -> None:
    with pytest.raises(HitchError) as info:
        apply_policy(CHAT, _chat(**extra), LOCK, "m")
    assert info.value.code == "inference_parameter_conflict"
    assert info.value.details["parameter"] == next(iter(extra))
    assert "benchmark lock" in info.value.message


def test_a_benchmark_lock_permits_the_controls_and_reports_each_use() -> None:
    p = apply_policy(CHAT, _chat(ignore_eos=True, min_tokens=16, max_tokens=16), BENCH, "m")
    assert p.benchmark_controls == {"ignore_eos": True, "min_tokens": 16}
    body = json.loads(p.body)
    assert (body["ignore_eos"], body["min_tokens"], body["max_tokens"]) == (True, 16, 16)
    only_default = apply_policy(CHAT, _chat(ignore_eos=False), BENCH, "m")
    assert only_default.benchmark_controls is None


@pytest.mark.parametrize(
    "extra",
    [{"min_tokens": 300}, {"min_tokens": 20, "max_tokens": 10}, {"min_tokens": -1}, {"min_tokens": 1.5},
     {"min_tokens": True}, {"ignore_eos": 1}, {"ignore_eos": "true"}],
)  # fmt: skip
def test_benchmark_controls_are_checked_even_on_a_benchmark_lock(extra: dict[str, Any]) -> None:
    with pytest.raises(HitchError) as info:
        apply_policy(CHAT, _chat(**extra), BENCH, "m")
    assert info.value.code == "inference_parameter_conflict"
    assert info.value.details["parameter"] == ("min_tokens" if "min_tokens" in extra else "ignore_eos")


def test_benchmark_controls_are_chat_only() -> None:
    """SGLang's Responses request has no such fields; the gateway refuses them there, never drops them."""
    with pytest.raises(HitchError) as info:
        apply_policy(RESP, _resp(ignore_eos=True), BENCH, "m")
    assert (info.value.code, info.value.details["parameter"]) == ("inference_parameter_conflict", "ignore_eos")
