"""The one way lines of a byte stream are read: however the stream is cut into chunks, the same
lines, a line over the cap given as its size, and every byte accounted for."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from turnwatch.runtime.lines import LineReader, Oversized

CAP = 8


def expected(data: bytes) -> list[bytes | Oversized]:
    out: list[bytes | Oversized] = []
    for part in data.split(b"\n")[:-1]:
        line = part + b"\n"
        out.append(line if len(line) <= CAP else Oversized(len(line)))
    last = data.rsplit(b"\n", 1)[-1]
    if last:
        out.append(last if len(last) <= CAP else Oversized(len(last)))
    return out


#: Lines around the cap (and a last one that may lack its newline), as bytes.
TEXT = st.builds(
    lambda sizes, last: b"".join(b"x" * n + b"\n" for n in sizes) + b"y" * last,
    st.lists(st.integers(0, 2 * CAP), max_size=20),
    st.integers(0, 2 * CAP),
)


@given(TEXT, st.lists(st.integers(1, 40), max_size=30))
def test_any_chunking_reads_the_same_lines(data: bytes, cuts: list[int]) -> None:
    reader = LineReader(cap=CAP)
    got: list[tuple[int, bytes | Oversized]] = []
    start = 0
    for size in [*cuts, len(data)]:
        got += reader.push(data[start : start + size])
        start += size
        if start >= len(data):
            break
    got += reader.end()
    assert [raw for _n, raw in got] == expected(data)
    assert [n for n, _raw in got] == list(range(1, len(got) + 1))
    assert reader.consumed == len(data)
    assert reader.pending == 0
