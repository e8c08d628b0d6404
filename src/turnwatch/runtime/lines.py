"""Lines of a byte stream, read in chunks: a partial last line waits for the rest, and a line
over the cap is skipped without ever being held whole (a transcript line can carry an image; a
file given by mistake may have no newline in gigabytes). The agent-log readers' and the event
readers' (``ingest``, its follower) one way of reading lines."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass

#: A longer line is skipped and reported (Claude Code writes images into its transcripts); the
#: event readers give their own, smaller cap.
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
        if self._buf or self._skipping:  # the line an earlier chunk began ends here, or not
            nl = data.find(b"\n")
            self._add(data if nl < 0 else data[: nl + 1])
            if nl < 0:
                return
            yield self._line()
            start = nl + 1
        cut = data.rfind(b"\n", start) + 1
        if cut > start:
            # Whole lines, split at C speed (ingest reads a million lines a minute this way).
            cap = self.cap
            for line in io.BytesIO(data[start:cut] if start or cut < len(data) else data):
                n = len(line)
                self.lineno += 1
                self.consumed += n
                yield self.lineno, line if n <= cap else Oversized(n)
            start = cut
        if start < len(data):
            self._add(data[start:])  # a line the next chunk goes on with

    def _add(self, piece: bytes) -> None:
        """Part of the line being read (a newline only at its end): kept, or, past the cap,
        only counted."""
        if self._skipping:
            self._skipping += len(piece)
        elif len(self._buf) + len(piece) > self.cap:
            self._skipping = len(self._buf) + len(piece)
            self._buf.clear()
        else:
            self._buf += piece

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
