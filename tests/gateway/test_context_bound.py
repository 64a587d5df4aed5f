"""The context check's proven bound: exact sizes where proven, exact render + count everywhere else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from gateway.context_check import ContextChecker
from gateway.template_bound import TemplateBound
from harness.errors import HitchError

SPECIALS = {"bos_token": "", "eos_token": "<|im_end|>", "unk_token": "", "pad_token": ""}


def _fixture_checker(tiny_model: Path) -> ContextChecker:
    """A fresh checker of the fixture checkpoint (not the per-process cached one: counters start at 0)."""
    return ContextChecker.load(tiny_model)


def _checker_with(tiny_model: Path, template: str) -> ContextChecker:
    tokenizer = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    return ContextChecker(tokenizer, template, SPECIALS, byte_bounded=True)


def _exact_tokens(checker: ContextChecker, messages: list[dict[str, Any]], tools: Any = None) -> int:
    return checker.count(checker.render(messages, tools))


def _no_render(*_: Any, **__: Any) -> str:
    raise AssertionError("the exact render ran")


def test_small_request_passes_without_render(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checker = _fixture_checker(tiny_model)
    monkeypatch.setattr(checker, "render", _no_render)
    monkeypatch.setattr(checker, "count", _no_render)
    for text in ("Write one short line.", "another question, é ü", "third"):
        verdict = checker.check([{"role": "user", "content": text}], None, 16, 2048)
        assert verdict.prompt_tokens is None and verdict.bound < 2048
    assert checker.skipped == 3
    assert checker._bound is not None and checker._bound.probes == 1  # one skeleton, proven once


def test_near_limit_request_is_counted_and_rejected_exactly(tiny_model: Path) -> None:
    checker = _fixture_checker(tiny_model)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there " * 40}]
    tokens = _exact_tokens(checker, messages)
    renders = checker.renders
    budget = 32
    # fits exactly: prompt + budget == context (the byte bound does not, so the render + count decide)
    ok = checker.check(messages, None, budget, tokens + budget)
    assert ok.prompt_tokens == tokens
    assert checker.renders == renders + 1
    # one token short: refused with the exact figures
    with pytest.raises(HitchError) as info:
        checker.check(messages, None, budget, tokens + budget - 1)
    assert info.value.code == "inference_context_exceeded"
    assert info.value.details["prompt_tokens"] == tokens
    assert checker.renders == renders + 2


def test_a_prompt_as_long_as_the_context_is_refused(tiny_model: Path) -> None:
    checker = _fixture_checker(tiny_model)
    messages = [{"role": "user", "content": "word " * 300}]
    tokens = _exact_tokens(checker, messages)
    with pytest.raises(HitchError) as info:
        checker.check(messages, None, 1, tokens)
    assert info.value.code == "inference_context_exceeded"


_ROLES = st.sampled_from(["system", "user", "assistant", "tool", "developer"])
_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
_CALL = st.fixed_dictionaries(
    {
        "id": st.text(max_size=5),
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": st.text(min_size=1, max_size=6), "arguments": st.text(max_size=20)}),
    }
)


@st.composite
def _conversation(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    messages: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 5))):
        msg: dict[str, Any] = {"role": draw(_ROLES), "content": draw(_TEXT)}
        if msg["role"] == "assistant" and draw(st.booleans()):
            msg["tool_calls"] = draw(st.lists(_CALL, min_size=1, max_size=2))
        if msg["role"] == "tool":
            msg["tool_call_id"] = draw(st.text(max_size=5))
        messages.append(msg)
    tools = None
    if draw(st.booleans()):
        tools = [{"type": "function", "function": {"name": draw(st.text(min_size=1, max_size=8)), "parameters": {}}}]
    return messages, tools


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conv=_conversation())
def test_proven_size_equals_the_rendered_size(tiny_model: Path, conv: tuple[list[dict[str, Any]], Any]) -> None:
    checker = ContextChecker.for_dir(tiny_model)
    messages, tools = conv
    assert checker._bound is not None
    shape = checker._bound.shape(messages, tools)
    assert shape is not None  # the fixture template only splices texts: every skeleton is provable
    assert shape.size(messages) == len(checker.render(messages, tools).encode("utf-8"))


def test_repeated_text_is_counted_each_time(tiny_model: Path) -> None:
    template = "{% for m in messages %}[{{ m.content }}|{{ m['content'] }}]{% endfor %}"
    checker = _checker_with(tiny_model, template)
    messages = [{"role": "user", "content": "abc"}, {"role": "user", "content": "é"}]
    assert checker._bound is not None
    shape = checker._bound.shape(messages, None)
    assert shape is not None and shape.times == (2, 2)
    assert shape.size(messages) == len(checker.render(messages, None).encode())


OBSERVING_TEMPLATES = {
    "compare": "{% for m in messages %}{% if m.content == 'x' %}{{ 'long' * 100 }}{% endif %}{{ m.content }}{% endfor %}",
    "contains": "{% for m in messages %}{% if 'x' in m.content %}{{ 'long' * 100 }}{% endif %}{% endfor %}",
    "method": "{% for m in messages %}{{ m.content.upper() }}{% endfor %}",
    "slice": "{% for m in messages %}{{ m.content[:3] }}{% endfor %}",
    "tojson": "{% for m in messages %}{{ m.content | tojson }}{% endfor %}",
    "whole message": "{% for m in messages %}{{ m }}{% endfor %}",
    "trim": "{% for m in messages %}{% if m.content | trim %}x{% endif %}{% endfor %}",
    "length": "{% for m in messages %}{{ 'y' * (m.content | length) }}{% endfor %}",
    "loop over chars": "{% for m in messages %}{% for c in m.content %}{{ c }}{{ c }}{% endfor %}{% endfor %}",
    "concat then compare": "{% for m in messages %}{% set t = 'a' ~ m.content %}{% if t == 'ax' %}zz{% endif %}{% endfor %}",
    "html escape": "{% for m in messages %}{{ m.content | e }}{% endfor %}",
    "format": "{% for m in messages %}{{ '%s-%s' % (m.content, m.content) }}{% endfor %}",
    "clock": "{{ strftime_now('%d %B %Y') }}{% for m in messages %}{{ m.content }}{% endfor %}",
    "int": "{% for m in messages %}{{ 'z' * (m.content | int) }}{% endfor %}",
}


@pytest.mark.parametrize("name", sorted(OBSERVING_TEMPLATES))
def test_a_template_that_observes_text_is_rendered_exactly(tiny_model: Path, name: str) -> None:
    checker = _checker_with(tiny_model, OBSERVING_TEMPLATES[name])
    messages = [{"role": "user", "content": "x"}]
    assert checker._bound is not None
    assert checker._bound.shape(messages, None) is None
    renders = checker.renders
    checker.check(messages, None, 1, 100_000)
    assert checker.renders == renders + 1  # no proof: the exact render decided


def test_a_template_that_keeps_failing_proofs_stops_being_probed(tiny_model: Path) -> None:
    checker = _checker_with(tiny_model, OBSERVING_TEMPLATES["compare"])
    bound = checker._bound
    assert bound is not None
    for i in range(40):
        bound.shape([{"role": f"r{i}", "content": "x"}], None)
    assert not bound.enabled and bound.probes == 32


def test_truth_tests_follow_emptiness(tiny_model: Path) -> None:
    template = "{% for m in messages %}{% if m.content %}<{{ m.content }}>{% else %}{{ 'EMPTY' * 50 }}{% endif %}{% endfor %}"
    bound = TemplateBound(template, {}, SPECIALS)
    for messages in ([{"role": "user", "content": "a"}], [{"role": "user", "content": ""}]):
        shape = bound.shape(messages, None)
        rendered = bound._template.environment.from_string(template).render(messages=messages)
        assert shape is not None and shape.size(messages) == len(rendered.encode())


def test_the_bound_never_admits_what_the_exact_check_refuses(tiny_model: Path) -> None:
    """Across sizes around the limit, the verdict with the bound equals the exact verdict."""
    fast = _fixture_checker(tiny_model)
    context, budget = 200, 20
    for n in range(0, 400, 7):
        messages = [{"role": "user", "content": "ab" * n}]
        exact = _exact_tokens(fast, messages)
        fits = exact < context and exact + budget <= context
        try:
            fast.check(messages, None, budget, context)
            got = True
        except HitchError as exc:
            assert exc.code == "inference_context_exceeded"
            got = False
        assert got == fits, json.dumps({"n": n, "exact": exact})


def _no_count(*_: Any, **__: Any) -> int:
    raise AssertionError("the prompt was tokenized")


def test_a_prompt_that_cannot_fit_is_refused_without_tokenizing(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checker = _fixture_checker(tiny_model)
    messages = [{"role": "user", "content": "abcdefghij" * 100_000}]  # 1 MB: >= 1 MB / 17 B tokens
    monkeypatch.setattr(checker, "count", _no_count)
    with pytest.raises(HitchError) as info:
        checker.check(messages, None, 16, 4096)
    assert info.value.code == "inference_context_exceeded"
    least = info.value.details["prompt_tokens_at_least"]
    assert least >= 1_000_000 // 17 and checker.refused_untokenized == 1
    monkeypatch.undo()
    assert checker.count(checker.render(messages, None)) >= least  # it is a lower bound


def test_the_lower_bound_never_refuses_what_fits(tiny_model: Path) -> None:
    checker = _fixture_checker(tiny_model)
    messages = [{"role": "user", "content": "hello there " * 300}]
    tokens = _exact_tokens(checker, messages)
    assert checker.check(messages, None, 16, tokens + 16).prompt_tokens == tokens
    assert checker.refused_untokenized == 0
