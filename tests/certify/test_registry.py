"""@check declares a certification check and marks its test in one place."""

from __future__ import annotations

import types

import pytest

from certify.registry import Check, all_checks, check, declared_in


def test_check_declares_and_marks_the_test() -> None:
    @check("protocol.example.one", required=False, engines=("fake",), description="an example")
    def test_one() -> None: ...

    module = types.SimpleNamespace(test_one=test_one)
    assert declared_in(module) == [
        Check("protocol.example.one", False, frozenset({"fake"}), frozenset({"cpu", "cuda"}), "an example")
    ]
    [mark] = [m for m in getattr(test_one, "pytestmark", []) if m.name == "check"]
    assert mark.args == ("protocol.example.one",)


def test_a_parametrized_check_declares_every_id_its_params_make() -> None:
    @check("faults.example.{api}.{mode}", params={"api": ("chat", "responses"), "mode": ("a",)}, description="{api}/{mode}")
    def test_two() -> None: ...

    specs = declared_in(types.SimpleNamespace(test_two=test_two))
    assert [(s.id, s.description) for s in specs] == [
        ("faults.example.chat.a", "chat/a"),
        ("faults.example.responses.a", "responses/a"),
    ]


def test_ids_must_start_with_a_suite() -> None:
    with pytest.raises(ValueError):
        check("nosuite.thing")


def test_the_suites_declare_each_id_once() -> None:
    checks = all_checks()
    assert len(checks) >= 60 and all("." in cid for cid in checks)


def test_a_check_that_leaves_out_an_engine_carries_its_reason() -> None:
    @check("faults.example.fake_only", engines=("fake",), reason="no real engine can be made to do this")
    def test_three() -> None: ...

    [spec] = declared_in(types.SimpleNamespace(test_three=test_three))
    assert spec.engines == {"fake"} and spec.reason == "no real engine can be made to do this"


def test_fault_checks_apply_to_real_sglang_or_say_why_not() -> None:
    faults = {cid: c for cid, c in all_checks().items() if c.suite == "faults"}
    on_sglang = [cid for cid, c in faults.items() if c.applies("sglang", "cpu")]
    assert len(on_sglang) >= 20
    assert [cid for cid, c in faults.items() if not c.applies("sglang", "cpu") and not c.reason] == []


def test_every_declared_summary_falls_back_to_its_description_on_details_it_cannot_read() -> None:
    """A summary is written from the details a pass records; for any other shape (none, a partial record) the
    check's description is its sentence, and a summary never raises into the evaluator."""
    for cid, spec in all_checks().items():
        for details in ({}, {"unexpected": [1, 2]}):
            text = spec.summarize(details)
            assert text and isinstance(text, str), cid
            assert "{" not in text or "{" in spec.description, (cid, text)  # no unfilled template
