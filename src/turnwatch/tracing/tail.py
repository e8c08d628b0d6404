"""Following a growing file as ``tail -F`` does: by inode and offset, losing no line.

- A file truncated or rewritten in place (``: > events.jsonl``, then new lines) is read again from
  its start. Its size alone cannot tell (the new lines may already be longer than what was read),
  so the first bytes read are kept and compared before reading on after a pause.
- A file renamed away and replaced (log rotation) is read to its end, then the new file under the
  same name from its start.
- A pipe or a terminal ends at EOF: the writer closed it, nothing more will come.
- A :class:`Position` says how far a file was read; a restarted reader resumes there when the
  file is still the same one (device, inode, first bytes, and not shorter).

The agent-CLI log readers build on the same follower.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from io import BufferedReader
from pathlib import Path

from turnwatch.runtime.lines import CHUNK, LineReader, Oversized
from turnwatch.tracing.ingest import MAX_LINE_BYTES

#: How many of a file's first bytes identify its contents (a rewrite changes them).
HEAD_BYTES = 256


@dataclass(frozen=True)
class Position:
    """How far a file was read: which file (device, inode, its first bytes in hex), the offset
    after the last whole line, and that line's number."""

    dev: int
    ino: int
    offset: int
    lineno: int
    head: str = ""


class Tail:
    """The lines of ``path``, each with its line number; following it if ``follow``.

    ``note`` hears what a person should know (a truncation, a rotation, a resume); ``idle`` is
    told, once per pause, how far the file was read (where a checkpoint is safe).
    """

    def __init__(
        self,
        path: Path,
        *,
        follow: bool = False,
        poll_s: float = 0.2,
        stop: Callable[[], bool] = lambda: False,
        resume: Position | None = None,
        note: Callable[[str], None] = lambda _m: None,
        idle: Callable[[Position], None] = lambda _p: None,
        max_line: int = MAX_LINE_BYTES,
    ) -> None:
        self.path = path
        self.max_line = max_line
        self.follow = follow
        self.poll_s = poll_s
        self.stop = stop
        self.note = note
        self.idle = idle
        self._file: BufferedReader = open(path, "rb")  # noqa: SIM115 - closed by close()
        st = os.fstat(self._file.fileno())
        self._regular = stat.S_ISREG(st.st_mode)
        self.position = Position(st.st_dev, st.st_ino, 0, 0)
        if resume is not None and self._regular and self._same(resume, st):
            self._file.seek(resume.offset)
            self.position = resume
            note(f"{path}: resuming at line {resume.lineno + 1} (byte {resume.offset})")

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Tail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[tuple[int, bytes | Oversized]]:
        lines, paused = self._lines(), False
        while True:
            if paused:  # before reading on: is it still the file we were reading?
                change = self._change(lines.pending)
                if change == "rotated":
                    # The old file to its end first: what the writer added since the last read,
                    # before the rename, is there and nowhere else (its last line may lack
                    # its newline).
                    while chunk := self._file.read1(CHUNK):
                        yield from self._advance(lines.push(chunk))
                    yield from self._advance(lines.end())
                    self._reopen()
                    lines = self._lines()
                elif change == "rewritten":  # the partial line belonged to the old contents
                    self._file.seek(0)
                    self.position = Position(self.position.dev, self.position.ino, 0, 0)
                    lines = self._lines()
            chunk = self._file.read1(CHUNK)
            if chunk:
                got = list(lines.push(chunk))  # at most a chunk's worth: whole lines in it
                if got:
                    paused = False
                    yield from self._advance(got)
                continue
            # Nothing more for now: a partial line (or an oversized one being skipped) waits.
            if not self.follow or not self._regular or self.stop():
                yield from self._advance(lines.end())  # a last line without a newline
                return
            if not paused:
                self.idle(self.position)
                paused = True
            time.sleep(self.poll_s)

    def _lines(self) -> LineReader:
        """Lines from where this file was read to (a line over the cap skipped, unheld)."""
        p = self.position
        return LineReader(offset=p.offset, lineno=p.lineno, cap=self.max_line)

    def _advance(
        self, got: Iterable[tuple[int, bytes | Oversized]]
    ) -> Iterator[tuple[int, bytes | Oversized]]:
        """Each line read, with the position after it (a skipped line's bytes counted too)."""
        for lineno, raw in got:
            p = self.position
            offset = p.offset + (raw.size if isinstance(raw, Oversized) else len(raw))
            head = p.head
            if self._regular and len(head) < 2 * HEAD_BYTES:  # still learning the first bytes
                head = os.pread(self._file.fileno(), min(HEAD_BYTES, offset), 0).hex()
            self.position = Position(p.dev, p.ino, offset, lineno, head)
            yield lineno, raw

    def _same(self, pos: Position, st: os.stat_result) -> bool:
        """``pos`` is of this open file: same inode, not shorter, the same first bytes."""
        if (st.st_dev, st.st_ino) != (pos.dev, pos.ino) or st.st_size < pos.offset:
            return False
        head = bytes.fromhex(pos.head)
        return os.pread(self._file.fileno(), len(head), 0) == head

    def _change(self, pending: int) -> str | None:
        """``rotated`` (another file has the name), ``rewritten`` (truncated, or its first
        bytes changed), or None (as it was, or renamed away with no new one yet)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        here = self.position
        if (st.st_dev, st.st_ino) != (here.dev, here.ino):
            self.note(f"{self.path}: replaced (rotated); reading the new file from its start")
            return "rotated"
        fd_st = os.fstat(self._file.fileno())
        if not self._same(replace(here, offset=here.offset + pending), fd_st):
            self.note(f"{self.path}: truncated or rewritten; reading it again from its start")
            return "rewritten"
        return None

    def _reopen(self) -> None:
        self._file.close()
        self._file = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        st = os.fstat(self._file.fileno())
        self.position = Position(st.st_dev, st.st_ino, 0, 0)
