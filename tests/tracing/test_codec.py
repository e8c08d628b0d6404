"""codec.loads reads what the standard library reads, integers of any size whole (#31 made its
check for long integers cheaper: these tests hold it to the same answers)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from turnwatch.tracing import codec

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # unbounded: beyond 64 bits either way
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),  # digits, other scripts' digits, characters of several UTF-8 bytes
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 == 1.0 would hide an int read as a
    float)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@given(_JSON)
@example(-(2**63) - 1)  # 19 digits, below int64: orjson reads a float
@example(2**64)  # 20 digits, beyond uint64
@example({"a": "é" + "1" * 19, "b": 2**80 + 1})
@example([10**18, 10**19, -(10**18)])
def test_loads_reads_as_the_standard_library(value: Any) -> None:
    text = json.dumps(value, ensure_ascii=False)
    expected = json.loads(text)
    assert _same(codec.loads(text.encode()), expected)
    assert _same(codec.loads(text), expected)
    assert _same(codec.loads_stored(text), expected)


@pytest.mark.parametrize(
    "text",
    [
        "9" * 18,
        "9" * 19,
        "-" + "9" * 19,
        "[" + "1" * 19 + "]",
        '{"k":"x' + "1" * 18 + '","n":' + "1" * 19 + "}",
        '"' + "1" * 9 + "é" + "1" * 10 + '"',  # a run broken by a two-byte character
        '"' + "١" * 19 + '"',  # another script's digits: no run
        "[1.000000000000000000001]",  # a float's digits: read as json reads them
    ],
)
def test_runs_of_digits_at_the_edges(text: str) -> None:
    expected = json.loads(text)
    assert _same(codec.loads(text.encode()), expected)
    assert _same(codec.loads(text), expected)


def test_text_with_a_lone_surrogate_is_checked_too() -> None:
    """Text read back holds what Python holds: a lone surrogate, raw, beside a long integer."""
    text = '["\udcff", ' + "1" * 20 + "]"
    expected = json.loads(text)
    assert _same(codec.loads(text), expected)
    assert _same(codec.loads_stored(text), expected)


def test_nan_and_infinity_stay_refused_on_both_paths() -> None:
    for text in ("[NaN]", "[Infinity, " + "1" * 20 + "]"):
        # orjson's refusal ("unexpected character") or the standard library's ("not JSON")
        with pytest.raises(ValueError, match=r"unexpected character|is not JSON"):
            codec.loads(text.encode())
