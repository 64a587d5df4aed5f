"""The structural diff and the allow-list (hermetic: no engine)."""

from __future__ import annotations

from fixtures.fake_sglang.parity_allowed import ALLOWED, Allowed
from fixtures.fake_sglang.parity_diff import Observation, diff, parse_sse, unexcused


def _obs(body: object, status: int = 200, kind: str = "json") -> Observation:
    return Observation(status, "application/json", {"content-type": "application/json"}, kind, body)


def test_identical_bodies_have_no_difference() -> None:
    body = {"a": 1, "b": [1, {"c": None}]}
    assert diff(_obs(body), _obs(body)) == []


def test_type_value_missing_extra_and_order_are_reported() -> None:
    fake = _obs({"b": 1, "a": 0, "x": True}, status=400)
    real = _obs({"a": 0.0, "b": 2, "y": "s"})
    kinds = {(d.path, d.kind) for d in diff(fake, real)}
    assert kinds == {
        (".status", "value"),
        (".body.{}", "value"),  # shared keys a, b in another order
        (".body.a", "type"),
        (".body.b", "value"),
        (".body.y", "missing"),
        (".body.x", "extra"),
    }


def test_sse_runs_of_same_shape_collapse() -> None:
    fake = _obs(parse_sse('data: {"d":"a"}\n\ndata: [DONE]\n\n'), kind="sse")
    real = _obs(parse_sse('data: {"d":"b"}\n\ndata: {"d":"c"}\n\ndata: [DONE]\n\n'), kind="sse")
    assert [d.path for d in diff(fake, real)] == [".body[0].data.d"]


def test_allow_list_excuses_only_its_probe_path_and_kind() -> None:
    rule = Allowed("chat*", ".body.id", frozenset({"value"}), "random")
    fake, real = _obs({"id": "a", "n": 1}), _obs({"id": "b", "n": 2})
    assert [d.path for d in unexcused("chat", fake, real, [rule])] == [".body.n"]
    assert [d.path for d in unexcused("other", fake, real, [rule])] == [".body.id", ".body.n"]


def test_every_allowed_difference_has_a_reason() -> None:
    assert all(rule.reason.strip() and rule.kinds <= {"value", "type", "missing", "extra"} for rule in ALLOWED)
