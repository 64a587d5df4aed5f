"""gateway.sglang_view: the messages and tools SGLang 0.5.23 hands the chat template (checked against real
SGLang's prompt token counts in tests/parity/test_prompt_count.py; these pin each rule without an engine)."""

from __future__ import annotations

import base64
import zlib
from pathlib import Path

import pytest

from fixtures.checkpoint.tokenizer_build import CHAT_TEMPLATE
from gateway.context_check import ContextChecker
from gateway.sglang_view import (
    DEVELOPER_LABEL,
    chat_messages,
    content_format,
    responses_messages,
    supports_inline_system,
    template_tools,
    template_view,
)
from harness.errors import HitchError

LEADING_SYSTEM_ONLY = (
    "{% if messages[0]['role'] == 'system' %}[S]{{ messages[0]['content'] }}{% endif %}"
    "{% for m in messages %}{% if m['role'] != 'system' %}[{{ m['role'] }}]{{ m['content'] }}{% endif %}{% endfor %}"
)


OUT_OK = {"type": "output_text", "text": "ok"}
R2 = {"text": "r2"}


def _blob(text: str) -> str:
    return "sglang-reasoning-v1." + base64.urlsafe_b64encode(zlib.compress(text.encode())).decode()


def test_developer_messages_become_labelled_system_messages() -> None:
    msgs = responses_messages(
        {
            "instructions": "Be a coder.",
            "input": [
                {"type": "message", "role": "developer", "content": "Use tools."},
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandbox."}]},
                {"type": "message", "role": "developer", "content": []},
            ],
        }
    )
    assert msgs == [
        {"role": "system", "content": "Be a coder."},
        {"role": "system", "content": f"{DEVELOPER_LABEL}\nUse tools."},
        {"role": "system", "content": [{"type": "text", "text": f"{DEVELOPER_LABEL}\nSandbox."}]},
        {"role": "system", "content": [{"type": "text", "text": DEVELOPER_LABEL}]},
    ]


def test_empty_instructions_add_no_system_message() -> None:
    assert responses_messages({"instructions": "", "input": "hi"}) == [{"role": "user", "content": "hi"}]


def test_one_assistant_turn_is_one_message_with_its_calls_and_parsed_arguments() -> None:
    msgs = responses_messages(
        {
            "input": [
                {"type": "message", "role": "user", "content": "go"},
                {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "think"}]},
                {"type": "message", "role": "assistant", "id": "m", "status": "completed", "content": [OUT_OK]},
                {"type": "function_call", "id": "fc", "call_id": "c1", "name": "f", "arguments": '{"a":1}'},
                {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "not json"},
                {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "r1"}, R2]},
            ]
        }
    )  # fmt: skip
    assert msgs == [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "reasoning_content": "think",
            "content": [{"type": "text", "text": "ok"}],
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}},
                {"id": "c2", "type": "function", "function": {"name": "g", "arguments": {}}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "r1r2"},
    ]


def test_string_assistant_contents_merge_with_a_blank_line() -> None:
    msgs = responses_messages(
        {
            "input": [
                {"role": "assistant", "content": "one"},
                {"role": "assistant", "content": "two"},
                {"role": "user", "content": "x"},
            ]
        }
    )
    assert msgs[0] == {"role": "assistant", "content": "one\n\ntwo"}


def test_reasoning_replayed_as_sglang_state_is_decoded_and_a_bomb_is_refused() -> None:
    msgs = responses_messages({"input": [{"type": "reasoning", "summary": [], "encrypted_content": _blob("trace")}]})
    assert msgs == [{"role": "assistant", "reasoning_content": "trace", "content": ""}]
    assert responses_messages({"input": [{"type": "reasoning", "summary": [], "encrypted_content": "opaque"}]}) == []
    with pytest.raises(HitchError) as err:
        responses_messages({"input": [{"type": "reasoning", "encrypted_content": _blob("0" * (9 << 20))}]})
    assert err.value.code == "inference_context_exceeded"


def test_chat_messages_drop_nulls_and_parse_history_arguments() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"b": [1, 2]}'}}
    out = chat_messages([{"role": "assistant", "content": None, "name": None, "tool_calls": [call]}])
    assert out == [
        {"role": "assistant", "content": "", "tool_calls": [{**call, "function": {"name": "f", "arguments": {"b": [1, 2]}}}]}
    ]
    bad = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}
    assert chat_messages([{"role": "assistant", "content": "", "tool_calls": [bad]}])[0]["tool_calls"] == [bad]


def test_chat_tools_are_dumped_like_sglangs_tool_model() -> None:
    tool = {"type": "function", "function": {"parameters": {"type": "object"}, "name": "f", "x-extra": 1}}
    assert template_tools([tool], "auto", responses=False) == [
        {
            "type": "function",
            "function": {"parameters": {"type": "object"}, "name": "f", "description": None},
            "defer_loading": None,
        }
    ]
    deferred = {"type": "function", "defer_loading": True, "function": {"name": "g", "strict": True}}
    function = {"name": "g", "strict": True, "description": None, "parameters": None, "defer_loading": True}
    assert template_tools([deferred], None, responses=False) == [
        {"type": "function", "function": function, "defer_loading": True}
    ]


def test_tool_choice_none_renders_no_tools_and_a_named_choice_only_that_tool() -> None:
    tools = [{"type": "function", "name": n, "parameters": {}} for n in ("a", "b")]
    assert template_tools(tools, "none", responses=True) is None
    named = template_tools(tools, {"type": "function", "name": "b"}, responses=True)
    assert named is not None and [t["function"]["name"] for t in named] == ["b"]
    assert named[0] == {
        "type": "function",
        "function": {"name": "b", "description": None, "parameters": {}, "strict": False},
        "defer_loading": None,
    }


def test_content_format_detection() -> None:
    assert content_format(CHAT_TEMPLATE) == "string"  # its loop is over a macro argument, not message content
    assert content_format("{% for p in message['content'] %}{{ p.text }}{% endfor %}") == "openai"
    assert content_format("{% for p in m.content | list %}{% endfor %}") == "openai"
    assert content_format("{{ vision }}") == "openai"
    assert content_format("{% for %}") == "string"


def test_system_folding_and_content_flattening() -> None:
    assert supports_inline_system(CHAT_TEMPLATE, {}) is True
    assert supports_inline_system(LEADING_SYSTEM_ONLY, {}) is False
    msgs = [
        {"role": "system", "content": "a"},
        {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]},
        {"role": "system", "content": [{"type": "text", "text": "b"}]},
        {"role": "tool", "content": [{"type": "text", "text": "t1"}, {"type": "text", "text": "t2"}]},
    ]
    assert template_view(msgs, "string", fold_system=True) == [
        {"role": "system", "content": "a\n\nb"},
        {"role": "user", "content": "x y"},
        {"role": "tool", "content": "t1 t2"},
    ]
    openai = template_view(msgs, "openai", fold_system=False)
    assert openai[1] == msgs[1] and openai[3] == {"role": "tool", "content": "t1 t2"}


def test_the_checker_renders_tools_like_transformers_and_folds_for_responses_only(tiny_model: Path) -> None:
    checker = ContextChecker.load(tiny_model)
    tools = template_tools([{"type": "function", "name": "f", "description": "<b>&'é"}], "auto", responses=True)
    text = checker.render(checker.view([{"role": "user", "content": "hi"}]), tools)
    # transformers' tojson: no HTML escaping, non-ASCII kept, the dump's key order (jinja's own would sort and escape)
    assert '{"type": "function", "function": {"name": "f", "description": "<b>&\'é", "parameters": null, "strict": false}' in text
    sys_msgs = [{"role": "system", "content": "a"}, {"role": "user", "content": "u"}, {"role": "system", "content": "b"}]
    assert checker.view(sys_msgs, responses=True) == sys_msgs  # this template renders inline system messages
