"""The structural diff and the allow-list (hermetic: no engine)."""

from __future__ import annotations

import json

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
    fake = _obs(parse_sse(b'data: {"d":"a"}\n\ndata: [DONE]\n\n'), kind="sse")
    real = _obs(parse_sse(b'data: {"d":"b"}\n\ndata: {"d":"c"}\n\ndata: [DONE]\n\n'), kind="sse")
    assert [d.path for d in diff(fake, real)] == [".body[0].data.d"]


def test_allow_list_excuses_only_its_probe_path_and_kind() -> None:
    rule = Allowed("chat*", ".body.id", frozenset({"value"}), "random")
    fake, real = _obs({"id": "a", "n": 1}), _obs({"id": "b", "n": 2})
    assert [d.path for d in unexcused("chat", fake, real, [rule])] == [".body.n"]
    assert [d.path for d in unexcused("other", fake, real, [rule])] == [".body.id", ".body.n"]


def test_every_allowed_difference_has_a_reason() -> None:
    assert all(rule.reason.strip() and rule.kinds <= {"value", "type", "missing", "extra"} for rule in ALLOWED)


def _generate_stream(chunks: list[int]) -> Observation:
    """A /generate stream whose cumulative output_ids grow by the given chunk sizes; the last one finishes."""
    lines, ids = [], []
    for i, size in enumerate(chunks):
        ids.extend(range(len(ids), len(ids) + size))
        last = i == len(chunks) - 1
        meta: dict[str, object] = {"finish_reason": {"type": "length", "length": len(ids)} if last else None}
        if last:
            meta["e2e_latency"] = 0.5
        lines.append("data: " + json.dumps({"text": "x", "output_ids": list(ids), "meta_info": meta}) + "\n\n")
    return _obs(parse_sse(("".join(lines) + "data: [DONE]\n\n").encode()), kind="sse")


def test_generate_stream_token_coalescing_is_not_a_difference() -> None:
    # CI saw real SGLang under load send 4 tokens as chunks of 1, 1, 2 while the fake sent 1, 1, 1, 1.
    fake, real = _generate_stream([1, 1, 1, 1]), _generate_stream([1, 1, 2])
    assert unexcused("generate.stream", fake, real) == []
    # and the other way round (CI later saw the fake send 1,3 while real sent 1,1,2)
    assert unexcused("generate.stream", _generate_stream([1, 3]), _generate_stream([1, 1, 2])) == []
    # and in the first chunk (CI saw real SGLang's first chunk hold 2 tokens)
    assert unexcused("generate.stream", _generate_stream([1, 1, 1, 1]), _generate_stream([2, 1, 1])) == []
    assert unexcused("generate.stream", _generate_stream([2, 2]), _generate_stream([1, 1, 1, 1])) == []
    # an id of another type is still a difference
    odd = _generate_stream([1, 1, 1, 1])
    odd.body[0]["data"]["output_ids"][0] = "0"
    assert [(d.path, d.kind) for d in unexcused("generate.stream", odd, _generate_stream([2, 1, 1]))] == [
        (".body[0].data.output_ids[0]", "type")
    ]
    # a stream that never finishes is still a difference
    unfinished = _obs(parse_sse(b'data: {"text": "x", "output_ids": [1], "meta_info": {"finish_reason": null}}\n\n'), kind="sse")
    assert unexcused("generate.stream", unfinished, real) != []


def test_sse_framing_lines_are_kept_verbatim() -> None:
    # What a client reads through (a heartbeat, "data:" without its space, CRLF) is a wire difference for parity.
    plain = parse_sse(b'event: a\ndata: {"d": 1}\n\n')
    assert plain == [{"event": "a", "data": {"d": 1}}]
    assert parse_sse(b': ping\nevent: a\ndata: {"d": 1}\n\n') == [{**plain[0], "unparsed_lines": [": ping"]}]
    assert parse_sse(b'event: a\ndata:{"d": 1}\n\n') == [{"event": "a", "data": "", "unparsed_lines": ['data:{"d": 1}']}]
    crlf = _obs(parse_sse(b'event: a\r\ndata: {"d": 1}\r\n\r\n'), kind="sse")
    assert diff(crlf, _obs(plain, kind="sse")) != []
