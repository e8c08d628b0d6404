"""Events as JSON lines in a file, for a ledger written by another process.

``Runtime(host, sink=EventLines(path))`` appends each event as one line of design §3 (what
``turnwatch ingest`` reads), and ``turnwatch ingest --follow PATH`` in a process of its own is the
ledger's writer. Use it where the runtime must not hold the SQLite file (several runtimes feeding
one ledger, a runtime in a container with the ledger outside it), or where the writer must be
able to die on its own: the lines are the record, and a restarted ``ingest --follow`` resumes
from its checkpoint (a line read twice is kept once).

Each event is one ``write(2)`` on an ``O_APPEND`` descriptor, made on the caller's thread: once
the call returns the line is the kernel's, and survives the runtime's SIGKILL (not a power loss:
nothing is fsynced). That is its price on the event loop: 3.5 to 4.4 µs an event here, against
0.2 to 0.7 µs for the ledger's enqueue, whose events a SIGKILL can catch in its queue.

While the file cannot be written (a full disk, a vanished directory's volume) the lines wait in
memory, in order, up to :data:`BACKLOG_MAX`; past it the oldest are dropped, counted in
:attr:`EventLines.lost`, and marked by a ``ledger.gap`` line per session once the file takes a
write again, as the ledger's own writer does (one gap per session whose lines an outage dropped:
what is kept is bounded by those sessions). The cause is said once per outage.

The file is appended to, never truncated or rotated here: rotate it with ``copytruncate`` or
not at all (the follower reads through both, but a renamed file keeps taking this sink's lines).
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import threading
import time
from pathlib import Path

from turnwatch.runtime.events import Event
from turnwatch.tracing import codec
from turnwatch.tracing.gaps import Gap, note_gap

log = logging.getLogger("turnwatch.eventlines")

#: Lines kept, in order, while the file cannot be written; past this the oldest are dropped.
BACKLOG_MAX = 100_000
#: The first and longest wait between tries while the file cannot be written. A try is made on
#: the next event (or flush) after the wait: the sink has no thread of its own.
RETRY_FIRST_S, RETRY_MAX_S = 0.05, 2.0


def encode(event: Event) -> bytes:
    """One event as its JSON line (newline included); anything unknown becomes its ``str``."""
    return codec.dumps_line(event.to_json())


class EventLines:
    """An event sink appending JSON lines to ``path`` (created 0600 if missing).

    Thread-safe; ``flush()`` writes what waits, ``close()`` also counts what still cannot be
    written as lost, and says so.
    """

    def __init__(self, path: Path | str, *, backlog_max: int = BACKLOG_MAX) -> None:
        self.path = Path(path)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        self._fd: int | None = os.open(self.path, flags, 0o600)
        self._backlog_max = backlog_max
        self._lock = threading.Lock()
        # Lines waiting, in order, with their events (for the gaps); the first may be the rest
        # of a line the file took only part of.
        self._backlog: collections.deque[tuple[bytes, Event]] = collections.deque()
        self._head_partial = False  # the file has the first part of the first line waiting
        self._gaps: dict[str, Gap] = {}
        #: Why the file cannot be written now (None: it can), said once per outage.
        self.failing: str | None = None
        self._next_try = 0.0
        self._retry_s = RETRY_FIRST_S
        #: Events written, and events lost (with why the last was).
        self.written = 0
        self.lost = 0
        self.lost_why = ""

    def __call__(self, event: Event) -> None:
        line = encode(event)
        with self._lock:
            if self._fd is None:
                self._lose(1, "event lines closed")
                return
            failed: OSError | None = None
            if not self._backlog and not self._gaps:
                try:
                    n = os.write(self._fd, line)
                except OSError as exc:
                    failed, n = exc, 0
                if n == len(line):
                    self.written += 1
                    return
                if failed is None:  # the disk took part of it: no error, but full
                    failed = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                line = line[n:]  # the rest goes first: a line is never broken by another
                self._head_partial = n > 0
            self._backlog.append((line, event))
            if failed is not None:  # tried just now: the next try after the back-off
                self._fail(failed)
                self._next_try = time.monotonic() + self._retry_s
            self._bound()
            if time.monotonic() >= self._next_try:
                self._retry()

    def flush(self) -> bool:
        """Write what waits; True once nothing does."""
        with self._lock:
            if self._fd is not None and (self._backlog or self._gaps):
                self._retry()
            return not self._backlog and not self._gaps

    def close(self) -> None:
        """Write what waits, then close; what still cannot be written is counted lost."""
        with self._lock:
            if self._fd is None:
                return
            if self._backlog or self._gaps:
                self._retry()
            if self._backlog:
                self._lose(len(self._backlog), f"closed while {self.failing}")
                self._backlog.clear()
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> EventLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_all(self, data: bytes) -> None:
        assert self._fd is not None
        done = 0
        while done < len(data):
            n = os.write(self._fd, data[done:])
            if n == 0:  # no error and no progress: treat as a full file
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            done += n

    def _write_head(self) -> None:
        """The first line waiting, or as much of it as the file takes (then OSError)."""
        assert self._fd is not None
        line, ev = self._backlog[0]
        n = os.write(self._fd, line)
        if n < len(line):
            self._backlog[0] = (line[n:], ev)
            self._head_partial = self._head_partial or n > 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._backlog.popleft()
        self._head_partial = False
        self.written += 1

    def _retry(self) -> None:
        """Write the gaps (they stand where the lost lines would have), then what waits."""
        try:
            if self._head_partial:  # its rest first: nothing may land inside a begun line
                self._write_head()
            if self._gaps:
                self._write_all(b"".join(encode(g.event(s)) for s, g in self._gaps.items()))
                self._gaps.clear()
            while self._backlog:
                self._write_head()
        except OSError as exc:
            self._fail(exc)
            self._next_try = time.monotonic() + self._retry_s
            self._retry_s = min(self._retry_s * 2, RETRY_MAX_S)
            return
        if self.failing is not None:
            log.warning(
                "turnwatch event lines %s: writing again (%s is over; %d event(s) lost in all)",
                self.path,
                self.failing,
                self.lost,
            )
            self.lost_why = ""  # a new outage is said again
        self.failing = None
        self._retry_s = RETRY_FIRST_S

    def _fail(self, exc: OSError) -> None:
        if self.failing is None:
            self.failing = exc.strerror or str(exc)
            log.warning(
                "turnwatch event lines %s: cannot write (%s); %d event(s) waiting, retrying",
                self.path,
                self.failing,
                len(self._backlog),
            )

    def _bound(self) -> None:
        over = len(self._backlog) - self._backlog_max
        if over <= 0:
            return
        # A line the file has begun stays: dropping its rest would break it, and the next.
        head = self._backlog.popleft() if self._head_partial else None
        for _ in range(over):  # the oldest go: what is newest says most about what is live now
            _line, ev = self._backlog.popleft()
            note_gap(self._gaps, ev, self.failing)
        if head is not None:
            self._backlog.appendleft(head)
        self._lose(over, f"{self.failing}: more than {self._backlog_max} events waited")

    def _lose(self, n: int, why: str) -> None:
        said = self.lost_why == why  # once per cause and outage; the total is in ``lost``
        self.lost += n
        self.lost_why = why
        if not said:
            log.error(
                "turnwatch event lines %s: event(s) could not be written: %s; dropping the oldest",
                self.path,
                why,
            )
