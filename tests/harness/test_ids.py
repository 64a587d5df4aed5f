"""Canonical JSON follows RFC 8785 (its own test vectors) and ids are sha256 of it."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.ids import canonical_json, digest_json, is_sha256_id

# RFC 8785 §3.2.2 (structure, literals, strings, numbers).
RFC_INPUT = (
    '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
    ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
    ' "literals": [null, true, false]}'
)
RFC_OUTPUT = (
    '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
    '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
)

# RFC 8785 §3.2.3 (property sorting by UTF-16 code units).
SORT_INPUT = {
    "\u20ac": "Euro Sign",
    "\r": "Carriage Return",
    "\ufb33": "Hebrew Letter Dalet With Dagesh",
    "1": "One",
    "\U0001f600": "Emoji: Grinning Face",
    "\u0080": "Control",
    "\u00f6": "Latin Small Letter O With Diaeresis",
}
SORT_ORDER = ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]

# RFC 8785 Appendix B: IEEE 754 bit patterns → canonical number text.
NUMBER_VECTORS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("41b3de4355555555", "333333333.3333333"),
    ("4415af1d78b58c40", "100000000000000000000"),
    ("4415af1d78b58c3f", "99999999999999980000"),
]


def test_rfc8785_structure_vector() -> None:
    assert canonical_json(json.loads(RFC_INPUT)).decode() == RFC_OUTPUT


def test_rfc8785_sorting_vector() -> None:
    out = canonical_json(SORT_INPUT).decode()
    assert list(json.loads(out)) == SORT_ORDER


@pytest.mark.parametrize(("bits", "expected"), NUMBER_VECTORS)
def test_rfc8785_number_vectors(bits: str, expected: str) -> None:
    value = struct.unpack(">d", bytes.fromhex(bits))[0]
    assert canonical_json(value).decode() == expected


@pytest.mark.parametrize("text", [RFC_OUTPUT, json.dumps(SORT_INPUT)])
def test_canonical_round_trip(text: str) -> None:
    once = canonical_json(json.loads(text))
    assert canonical_json(json.loads(once)) == once


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@given(json_values)
def test_canonical_is_a_fixed_point_and_key_order_free(value: object) -> None:
    once = canonical_json(value)
    assert canonical_json(json.loads(once)) == once
    if isinstance(value, dict):
        reordered = dict(reversed(list(value.items())))
        assert digest_json(reordered) == digest_json(value)


def test_digest_format() -> None:
    d = digest_json({"a": 1})
    assert is_sha256_id(d)
    assert d != digest_json({"a": 2})
    assert not is_sha256_id("sha256:" + "0" * 63)
