"""Following a file as ``tail -F`` does, against what a writer and logrotate do between two of
its reads. The follower's ``idle`` hook runs as it pauses at the end of the file: what it does
there, a writer does while the follower sleeps. Real files."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from turnwatch.runtime.lines import Oversized
from turnwatch.tracing.tail import Position, Tail


def follow(path: Path, during_pauses: list[Callable[[], None]]) -> list[bytes | Oversized]:
    """Every line of ``path`` followed until the pauses' actions are spent (one per pause)."""
    todo = list(during_pauses)

    def idle(_pos: Position) -> None:
        if todo:
            todo.pop(0)()

    with Tail(path, follow=True, poll_s=0.01, idle=idle, stop=lambda: not todo) as tail:
        return [raw for _n, raw in tail]


def test_lines_written_just_before_a_rotation_are_read_from_the_old_file(tmp_path: Path) -> None:
    """The writer appends its last lines, logrotate renames the file away and a new one takes
    the name, all while the follower sleeps: the old file's last lines are read before the new
    file (they were lost: the follower went to the new file on seeing it)."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"a\n")

    def write_then_rotate() -> None:
        with path.open("ab") as f:
            f.write(b"b\nc")  # and a last line left without its newline
        path.rename(tmp_path / "events.jsonl.1")
        path.write_bytes(b"d\n")

    assert follow(path, [write_then_rotate, lambda: None]) == [b"a\n", b"b\n", b"c", b"d\n"]


def test_a_partial_line_completed_before_a_rotation_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"a\nb")  # the writer is mid-line

    def finish_then_rotate() -> None:
        with path.open("ab") as f:
            f.write(b"bb\n")
        os.rename(path, tmp_path / "events.jsonl.1")
        path.write_bytes(b"c\n")

    assert follow(path, [finish_then_rotate, lambda: None]) == [b"a\n", b"bbb\n", b"c\n"]
