"""What a call makes of its host's messages: the tail of its output, and its events' attributes.

A ``Started`` becomes ``tool.started``'s attributes (the process, its containment); a ``Progress``
is the call's heartbeat (``tool.progress``) and adds to the output it returns if the host cannot
answer in time. Both are built only where a sink wants them.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from turnwatch import names
from turnwatch.runtime.protocol import Progress, Started

#: How much collected output a call keeps (the tail), so a chatty process cannot eat memory.
OUTPUT_CAP = 256 * 1024
#: How much of one progress chunk goes into its event.
PROGRESS_TEXT_CAP = 256
#: How much of a call's error text goes into its event (the caller gets it whole): 20 MB of a
#: server's message went into the ledger's row and the span, whose OTLP batch it then failed.
ERROR_TEXT_CAP = 4096
#: At most one ``tool.progress`` per call this often (seconds): the heartbeat, however often the
#: host reports. What is between goes into the call's output, not into the ledger.
PROGRESS_EVERY_S = 0.05


class OutputTail:
    """The last :data:`OUTPUT_CAP` characters a call's host reported (whole chunks)."""

    __slots__ = ("_chunks", "_len")

    def __init__(self) -> None:
        self._chunks: deque[str] = deque()
        self._len = 0

    def __bool__(self) -> bool:
        return bool(self._chunks)

    def add(self, text: str) -> None:
        self._chunks.append(text)
        self._len += len(text)
        while self._len > OUTPUT_CAP and len(self._chunks) > 1:
            self._len -= len(self._chunks.popleft())

    def take(self) -> str:
        """The text, and the buffer emptied: a resolved call's result holds it from then on."""
        text = "".join(self._chunks)
        self._chunks.clear()
        self._len = 0
        return text


def started_attrs(class_name: str, message: Started, traceparent: str | None) -> dict[str, Any]:
    """``tool.started``'s attributes for the host's ``Started``."""
    attrs: dict[str, Any] = {names.K_CLASS: class_name}
    if message.pid is not None:
        attrs.update(pid=message.pid, create_time=message.create_time)
        if message.start_ticks is not None:
            attrs[names.K_START_TICKS] = message.start_ticks
        if message.boot_id is not None:  # also without ticks: what the call leaves is of it
            attrs[names.K_BOOT_ID] = message.boot_id
    if message.containment is not None:
        attrs[names.K_CONTAINMENT] = message.containment
    if message.cgroup is not None:
        attrs[names.K_CGROUP] = message.cgroup
        if message.cgroup_id is not None:
            attrs[names.K_CGROUP_ID] = message.cgroup_id
    if message.holes:
        attrs[names.K_HOLES] = list(message.holes)
    if traceparent:  # an agent framework's run: its execute_tool joins it
        attrs[names.K_TRACEPARENT] = traceparent
    return attrs


def coalesced(first: Progress, then: Progress) -> Progress:
    """Two progress reports as one: their text in order, as much as an event keeps (so what
    waits stays small however chatty the host), and the latest count and total."""
    text = first.text
    if len(text) < PROGRESS_TEXT_CAP and then.text:
        text += then.text[: PROGRESS_TEXT_CAP - len(text)]
    return Progress(
        text=text,
        progress=then.progress if then.progress is not None else first.progress,
        total=then.total if then.total is not None else first.total,
    )


def progress_attrs(message: Progress) -> dict[str, Any]:
    """``tool.progress``'s attributes: a chunk of text (its head), or a count of a total."""
    attrs: dict[str, Any] = {}
    if message.text:
        attrs[names.K_TEXT] = message.text[:PROGRESS_TEXT_CAP]
    if message.progress is not None:
        attrs[names.K_PROGRESS] = message.progress
    if message.total is not None:
        attrs[names.K_TOTAL] = message.total
    return attrs


def recorded_error(text: str) -> str:
    """A call's error as its event keeps it: its first :data:`ERROR_TEXT_CAP` characters, and
    how many more there were."""
    if len(text) <= ERROR_TEXT_CAP:
        return text
    return f"{text[:ERROR_TEXT_CAP]}… ({len(text) - ERROR_TEXT_CAP:,} more characters)"
