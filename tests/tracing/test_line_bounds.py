"""A line over the cap is skipped without ever being held whole, wherever lines are read.

``ingest`` said "line is 300000000 bytes, over the 1048576 limit": true, once it had read the
300 MB into memory (a file with no newline, ``/dev/zero`` copied, a binary given by mistake;
10 GB of it is 10 GB of RSS). Followed, a writer that never ends its line grew the same way.
The agent-log reader already skipped such a line in chunks; the event-lines reader, the
follower and the check of which kind a file is now do too.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from tests.tracing.test_ingest import GOOD
from turnwatch.runtime import MemorySink
from turnwatch.tracing.ingest import MAX_LINE_BYTES, ingest
from turnwatch.tracing.tail import Tail

HUGE = 40 * MAX_LINE_BYTES  # 40 MiB in one line


def huge_file(path: Path, *, first: bool, size: int = HUGE) -> Path:
    """Good lines around one of ``size`` bytes of ``x`` (first in the file, or in the
    middle)."""
    with open(path, "wb") as f:
        if not first:
            f.write(GOOD.encode() + b"\n")
        for _ in range(size // (1 << 20)):
            f.write(b"x" * (1 << 20))
        f.write(b"\n" + GOOD.encode() + b"\n")
    return path


def test_ingest_skips_an_oversized_line_without_holding_it(tmp_path: Path) -> None:
    src = huge_file(tmp_path / "events.jsonl", first=False)
    sink = MemorySink()
    tracemalloc.start()
    with open(src, "rb") as f:
        report = ingest(f, sink)
    top = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert report.good == 2
    assert [(b.lineno, b.reason) for b in report.bad] == [
        (2, f"line is {HUGE + 1} bytes, over the {MAX_LINE_BYTES} limit")
    ]
    assert top < 8 * MAX_LINE_BYTES, top  # before: the whole line, 40 MiB and more


def test_a_followed_file_skips_an_oversized_line_without_holding_it(tmp_path: Path) -> None:
    src = huge_file(tmp_path / "events.jsonl", first=False)
    sink = MemorySink()
    tracemalloc.start()
    with Tail(src, follow=False) as t:
        report = ingest(t, sink)
        end = t.position
    top = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert report.good == 2
    assert [b.lineno for b in report.bad] == [2]
    assert end.offset == src.stat().st_size  # every byte accounted for, the skipped ones too
    assert end.lineno == 3
    assert top < 8 * MAX_LINE_BYTES, top


def test_a_line_without_end_grows_nothing_while_it_is_followed(tmp_path: Path) -> None:
    """A writer that never ends its line: the follower keeps what it may still need to read
    (nothing past the cap), and reports the line once its end comes."""
    src = tmp_path / "events.jsonl"
    src.write_bytes(GOOD.encode() + b"\n")
    polls = 0

    def stop() -> bool:
        nonlocal polls
        polls += 1
        with open(src, "ab") as f:
            if polls <= 10:
                f.write(b"x" * (4 << 20))  # 40 MiB over ten polls, and no end yet
            elif polls == 11:
                f.write(b"\n" + GOOD.encode() + b"\n")
        return polls > 12

    sink = MemorySink()
    tracemalloc.start()
    with Tail(src, follow=True, poll_s=0.0, stop=stop) as t:
        report = ingest(t, sink)
    top = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert report.good == 2
    assert [b.lineno for b in report.bad] == [2]
    assert top < 8 * MAX_LINE_BYTES + (4 << 20), top  # a poll's 4 MiB, read in chunks


def max_rss_kib(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """The peak RSS of a real run of ``argv`` (the kernel's count), and what it said."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read().decode() if proc.stdout else ""
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if proc.stdout:
        proc.stdout.close()
    return usage.ru_maxrss, out


@pytest.mark.parametrize("first", [True, False], ids=["first line", "a later line"])
def test_the_ingest_command_never_holds_a_huge_line(tmp_path: Path, first: bool) -> None:
    # 200 MiB in one line: far above what reading it in chunks costs. The first line of a
    # file decides how it is read (event lines, or an agent's session file): both ways.
    src = huge_file(tmp_path / "mystery.bin", first=first, size=5 * HUGE)
    env = {**os.environ, "TURNWATCH_LEDGER": str(tmp_path / "ledger.sqlite3")}
    small = tmp_path / "small.bin"
    small.write_bytes(b"x" * 100 + b"\n")
    floor, _ = max_rss_kib([sys.executable, "-m", "turnwatch", "ingest", str(small)], env)
    kib, out = max_rss_kib([sys.executable, "-m", "turnwatch", "ingest", str(src)], env)
    assert "over the" in out, out
    # Before: the line, whole (200 MiB and more over the floor); now a few chunks.
    assert kib - floor < 40 * 1024, (kib, floor, out)


def test_the_check_of_a_files_kind_reads_no_more_than_the_cap(tmp_path: Path) -> None:
    from turnwatch.cli.agent_files import is_event_lines

    src = huge_file(tmp_path / "mystery.bin", first=True)
    tracemalloc.start()
    kind = is_event_lines(src)
    top = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert kind is False
    assert top < 4 * MAX_LINE_BYTES, top  # before: the whole first line


def test_bounded_reading_keeps_every_ordinary_line(tmp_path: Path) -> None:
    lines = [GOOD.encode() + b"\n"] * 3 + [GOOD.encode()]  # the last without its newline
    sink = MemorySink()
    report = ingest(io.BytesIO(b"".join(lines)), sink)
    assert (report.good, report.bad) == (4, [])
