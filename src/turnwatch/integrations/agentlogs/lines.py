"""Lines of a session file, read in chunks: a partial last line waits for the rest, and a line
over the cap is skipped without ever being held whole (a transcript line can carry an image)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

#: A longer line is skipped and reported (Claude Code writes images into its transcripts).
MAX_LINE_BYTES = 32 * 1024 * 1024
CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Oversized:
    """A line that was over the cap: how long it was."""

    size: int


class LineReader:
    """Bytes in, whole numbered lines out. ``consumed`` is the offset just after the last whole
    line handed out (or skipped): where a reader that stops now must resume."""

    def __init__(self, *, offset: int = 0, lineno: int = 0, cap: int = MAX_LINE_BYTES) -> None:
        self.cap = cap
        self.consumed = offset
        self.lineno = lineno
        self._buf = bytearray()
        self._skipping = 0  # bytes of an oversized line dropped so far (0: not skipping)

    @property
    def pending(self) -> int:
        """Bytes read past ``consumed``: a partial line, or the part of an oversized one."""
        return len(self._buf) + self._skipping

    def push(self, data: bytes) -> Iterator[tuple[int, bytes | Oversized]]:
        start = 0
        while start < len(data):
            nl = data.find(b"\n", start)
            end = len(data) if nl < 0 else nl + 1
            piece = data[start:end]
            start = end
            if self._skipping:
                self._skipping += len(piece)
            elif len(self._buf) + len(piece) > self.cap:
                self._skipping = len(self._buf) + len(piece)
                self._buf.clear()
            else:
                self._buf += piece
            if nl < 0:
                return
            yield self._line()

    def end(self) -> Iterator[tuple[int, bytes | Oversized]]:
        """The end of the input: a last line without its newline is a line too."""
        if self.pending:
            yield self._line()

    def _line(self) -> tuple[int, bytes | Oversized]:
        self.lineno += 1
        out: bytes | Oversized
        if self._skipping:
            out = Oversized(self._skipping)
            self.consumed += self._skipping
            self._skipping = 0
        else:
            out = bytes(self._buf)
            self.consumed += len(out)
            self._buf.clear()
        return self.lineno, out
