"""A process call's output as the agent gets it: each stream decoded whole, the total bounded.

Pipes deliver bytes where the writer's and the reader's buffers happen to cut them, often
inside a character (a 64 KiB read of CJK text ends mid-character one time in three): each stream
keeps its own incremental UTF-8 decoder, so a character cut in two is joined, never replaced.

A command can print without end (``yes``, a runaway build log, ``cat`` of a disk image): what
is kept is bounded, its first and last :data:`MAX_OUTPUT_CHARS` halves, with a line saying how
much was left out between them, as Claude Code and Codex cut a command's output. The head is
where the command began; the tail is where it failed.
"""

from __future__ import annotations

import codecs
import collections

from turnwatch.runtime.messages import OUTPUT_CAP

#: The most of a call's output kept (characters): half from its start, half from its end. The
#: runtime keeps as much of a call's progress (:data:`~turnwatch.runtime.messages.OUTPUT_CAP`).
MAX_OUTPUT_CHARS = OUTPUT_CAP


def omitted_line(chars: int) -> str:
    """What stands in the output for the ``chars`` characters left out."""
    return f"\n[… {chars:,} characters of output omitted …]\n"


class Output:
    """One output, in arrival order, from streams each decoded as UTF-8 on its own."""

    def __init__(self, max_chars: int = MAX_OUTPUT_CHARS) -> None:
        self._half = max(max_chars // 2, 1)
        self._decoders: dict[int, codecs.IncrementalDecoder] = {}
        self._head: list[str] = []
        self._head_len = 0
        self._tail: collections.deque[str] = collections.deque()
        self._tail_len = 0
        #: Characters dropped from between the head and the tail.
        self.omitted = 0

    def feed(self, stream: int, data: bytes, *, final: bool = False) -> str:
        """Add what ``stream`` delivered (``final``: it ended); returns the text it decoded."""
        decoder = self._decoders.get(stream)
        if decoder is None:
            decoder = self._decoders[stream] = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(data, final)
        if text:
            self._keep(text)
        return text

    def _keep(self, text: str) -> None:
        room = self._half - self._head_len
        if room > 0:
            self._head.append(text[:room])
            self._head_len += min(room, len(text))
            text = text[room:]
            if not text:
                return
        self._tail.append(text)
        self._tail_len += len(text)
        # Whole pieces past the tail's half go; the one left over is cut when read.
        while self._tail_len - len(self._tail[0]) >= self._half:
            dropped = self._tail.popleft()
            self._tail_len -= len(dropped)
            self.omitted += len(dropped)

    @property
    def text(self) -> str:
        """What is kept: all of it, or its head, the omitted line and its tail."""
        tail = "".join(self._tail)
        over = len(tail) - self._half
        if over > 0:
            tail = tail[over:]
        omitted = self.omitted + max(over, 0)
        head = "".join(self._head)
        return head + omitted_line(omitted) + tail if omitted else head + tail
