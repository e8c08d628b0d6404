"""A process call's output as the agent gets it: whole characters, bounded, its heartbeat sparse.

Real Bash calls through the runtime (the pipes cut where the kernel cuts them), and the
:class:`Output` buffer against any cut of any text.
"""

from __future__ import annotations

import itertools
import time

from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import until
from turnwatch import names
from turnwatch.runtime import LocalHost, MemorySink, Outcome, Runtime
from turnwatch.runtime.messages import PROGRESS_EVERY_S
from turnwatch.runtime.tools.output import MAX_OUTPUT_CHARS, Output, omitted_line

#: Printed by one process to stdout and stderr at once: 3-byte characters, so a 64 KiB read
#: ends inside one two times in three (240,000 of them: under the kept bound).
BOTH_STREAMS = (
    "python3 -c \"import sys; [s.write('日本語' * 40000) or s.flush() "
    'for s in (sys.stdout, sys.stderr)]"'
)


async def test_characters_cut_by_the_pipe_come_back_whole() -> None:
    """Before: each read was decoded alone; 300,000 such characters came back with 23 U+FFFD
    where 9 of them had been cut."""
    runtime = Runtime(LocalHost(), sink=MemorySink())
    turn = runtime.start_turn("s1")

    result = await turn.request("Bash", {"command": BOTH_STREAMS}).result()

    assert result.outcome is Outcome.COMPLETED, result
    assert "\ufffd" not in result.output
    assert result.output == "日本語" * 80000


async def test_endless_output_is_kept_head_and_tail_and_its_heartbeat_is_sparse() -> None:
    """``yes`` through ``head``: 20 MB. Before: all of it was kept (a 200 MB run took the
    runtime to 437 MiB), and each 64 KiB read was a ``tool.progress`` (24,000 a second, more
    than the ledger's writer takes from a few such calls)."""
    sink = MemorySink()
    runtime = Runtime(LocalHost(), sink=sink)
    turn = runtime.start_turn("s1")
    total = 20_000_000

    started = time.monotonic()
    result = await turn.request("Bash", {"command": f"yes | head -c {total}"}).result()
    took = time.monotonic() - started

    half = MAX_OUTPUT_CHARS // 2
    assert result.outcome is Outcome.COMPLETED, result
    assert result.output == "y\n" * (half // 2) + omitted_line(total - 2 * half) + "y\n" * (
        half // 2
    )
    progress = [e for e in sink.events if e.kind == names.TOOL_PROGRESS]
    # One at the start of each window, and one for what came in the last.
    assert 1 <= len(progress) <= took / PROGRESS_EVERY_S + 2, (len(progress), took)


async def test_the_last_word_before_a_call_goes_quiet_is_recorded() -> None:
    """Reports sparse, not lost: what came after the window's first is recorded when the
    window ends, though the call then says nothing for a long time."""
    sink = MemorySink()
    runtime = Runtime(LocalHost(), sink=sink)
    turn = runtime.start_turn("s1")
    call = turn.request("Bash", {"command": "echo first; sleep 0.01; echo last; sleep 30"})

    def said() -> str:
        return "".join(
            str(e.attrs.get(names.K_TEXT, "")) for e in sink.events if e.kind == names.TOOL_PROGRESS
        )

    await until(lambda: "last" in said(), timeout=5, what="the last word recorded")
    assert said() == "first\nlast\n"
    await runtime.abort("s1")
    await call.result()


def _cuts(data: bytes, points: list[int]) -> list[bytes]:
    edges = sorted({0, len(data), *(p % (len(data) + 1) for p in points)})
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@given(
    text=st.text(st.characters(codec="utf-8"), max_size=300),
    points=st.lists(st.integers(min_value=0), max_size=40),
    cap=st.integers(min_value=2, max_value=400),
)
def test_any_cut_of_any_text_is_kept_whole_or_as_its_head_and_tail(
    text: str, points: list[int], cap: int
) -> None:
    out = Output(max_chars=cap)
    for piece in _cuts(text.encode(), points):
        out.feed(1, piece)
    out.feed(1, b"", final=True)

    half = cap // 2
    if len(text) <= 2 * half:
        assert out.text == text
    else:
        assert out.text == text[:half] + omitted_line(len(text) - 2 * half) + text[-half:]


def test_two_streams_each_decoded_on_its_own() -> None:
    """A character cut in stdout is not joined with stderr's bytes between its halves."""
    out = Output()
    snow = "☃".encode()
    out.feed(1, b"a" + snow[:1])
    out.feed(2, "é".encode())
    out.feed(1, snow[1:] + b"b")
    assert out.text == "aé☃b"


def test_a_stream_that_ends_inside_a_character_says_so_once() -> None:
    out = Output()
    out.feed(1, b"ok " + "☃".encode()[:2])
    out.feed(1, b"", final=True)
    assert out.text == "ok \ufffd"
