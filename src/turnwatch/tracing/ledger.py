"""The ledger: every event, append-only, in a SQLite file (WAL).

The stop path only enqueues: one writer thread commits in batches, so the event loop never waits
on disk. Readers in other processes (the CLI, the watchdog) read while it writes. Besides the
events, the writer maintains two summary tables (``sessions``, ``calls``) in the same
transaction, so the derived view stays fast on big ledgers. This module is the producer's side
(enqueue, wait for room, flush, close); the writer thread, its batches and its outages are
:mod:`turnwatch.tracing.ledger_writer`; the file itself (its schema, opening it, reading and
writing batches) is :mod:`turnwatch.tracing.ledger_file`, whose names this module exports too.
"""

from __future__ import annotations

import atexit
import contextlib
import queue
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

from turnwatch.runtime import held_files
from turnwatch.runtime.events import Event
from turnwatch.runtime.fold import StepReader
from turnwatch.tracing.dedup import dedup_key
from turnwatch.tracing.gaps import Losses
from turnwatch.tracing.ledger_batch import write_batch
from turnwatch.tracing.ledger_file import (
    APPLICATION,
    BUSY_TIMEOUT_S,
    SCHEMA_VERSION,
    LedgerError,
    LedgerNotReady,
    connect,
    get_meta,
    meta_keys,
    read_events,
)
from turnwatch.tracing.ledger_writer import BATCH_MAX, Item, Meta, Writer
from turnwatch.tracing.past_calls import BUSY_TIMEOUT_S_PAST, LedgerCalls
from turnwatch.tracing.paths import default_path
from turnwatch.tracing.stages import Reader, Stages

#: Events the writer keeps, in order, while the file cannot be written (a full disk, a locked or
#: read-only file): past this, the oldest are dropped and counted lost. About 100 MB at most.
BACKLOG_MAX = 100_000
#: Events enqueued and not yet taken by the writer (the loop outpacing it: a slow disk, a reader
#: stuck in the writer thread): past this, new events are dropped, counted lost, and marked by a
#: ``ledger.gap`` per session once the writer catches up. About 100 MB at most.
QUEUE_MAX = 100_000
#: A producer waiting for the writer (``append(wait=True)``) is woken by it as it drains the
#: queue; past this it looks whether the writer still runs at all.
ROOM_WAIT_S = 0.5
#: How long a flush (and so ``close()``, which then counts what waits lost) waits for a file
#: that cannot be written.
CLOSE_WAIT_FAILING_S = 5.0


__all__ = [
    "APPLICATION",
    "BACKLOG_MAX",
    "BATCH_MAX",
    "QUEUE_MAX",
    "SCHEMA_VERSION",
    "Ledger",
    "LedgerError",
    "LedgerNotReady",
    "connect",
    "dedup_key",
    "get_meta",
    "meta_keys",
    "read_events",
    "write_batch",
]


class Ledger:
    """The writer side: ``append`` enqueues, a thread commits. Use as an event sink.

    The readers a :class:`~turnwatch.tracing.pipeline.Telemetry` attaches (the span builder,
    metrics) run in the writer thread too, on the step the writer's fold made for the summary
    rows, so the event loop only ever enqueues and each event is folded once; a reader that fails
    is logged, and the event still written.
    """

    def __init__(
        self,
        path: Path | str | None = None,
        *,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        transform: StepReader | None = None,
        observers: Sequence[Reader] = (),
    ) -> None:
        self.path = Path(path) if path is not None else default_path()
        self._busy_timeout_s = busy_timeout_s
        conn = connect(self.path, busy_timeout_s=busy_timeout_s)
        # This process's own file tools must not open it (closing it would drop its locks).
        held_files.hold(self.path)
        self._queue: queue.SimpleQueue[Item] = queue.SimpleQueue()
        # Events that could not be written (past the backlog's bound, or a batch no wait mends,
        # or dropped here, the writer being QUEUE_MAX behind), and why the last of them was.
        self._losses = Losses(self.path)
        self._writer = Writer(
            self.path,
            conn,
            self._queue,
            self._losses,
            busy_timeout_s=busy_timeout_s,
            backlog_max=BACKLOG_MAX,
            room_below=QUEUE_MAX // 2,
        )
        if transform is not None or observers:
            warnings.warn(
                "Ledger(transform=, observers=) is deprecated: wire readers with "
                "Telemetry(ledger=, spans=, observers=)",
                DeprecationWarning,
                stacklevel=2,
            )
            self.attach(Stages(transform, observers))
        self._closed = False
        self._writer.thread.start()
        atexit.register(self.close)

    @property
    def stages(self) -> Stages | None:
        """The readers the writer runs on each event's step (span builder, then observers)."""
        return self._writer.stages

    @property
    def written(self) -> int:
        """Events committed by this ledger's writer."""
        return self._writer.written

    @property
    def lost(self) -> int:
        """Events that could not be written: past a bound, or refused for what they hold."""
        return self._losses.n

    @property
    def lost_why(self) -> str:
        """Why the last lost event was."""
        return self._losses.why

    @property
    def failing(self) -> str | None:
        """Why the file cannot be written now (None: it can)."""
        return self._writer.failing

    def __call__(self, event: Event) -> None:
        self.append(event)

    def past_calls(self) -> LedgerCalls:
        """What this ledger's file remembers of past calls: a runtime given this ledger as its
        sink reads it (``Runtime(past=)``), so an approval sent after a restart for a prompt
        a stop closed before it is refused."""
        return LedgerCalls(self.path, busy_timeout_s=min(self._busy_timeout_s, BUSY_TIMEOUT_S_PAST))

    def attach(self, stages: Stages) -> None:
        """Give the writer its readers (once, before the first event: a reader that missed
        the stream's start would misread it)."""
        if self.stages is not None:
            raise ValueError(f"ledger {self.path} already has its readers")
        self._writer.stages = stages

    def append(self, event: Event, *, dedup: bool = False, wait: bool = False) -> None:
        """Enqueue one event (never blocks on disk).

        Past :data:`QUEUE_MAX` events waiting for the writer, a producer that must never block
        (the runtime's event loop) has the event dropped, counted and marked by a gap; one that
        may wait (``wait=True``: ``ingest`` reading a file, a request of the events API) waits
        until the writer has taken half of them, and loses nothing.
        """
        if self._closed:
            self._losses.lose(1, "ledger closed")
            return
        if self._queue.qsize() >= QUEUE_MAX and not (wait and self._wait_for_room()):
            self._losses.drop(event, f"the writer was more than {QUEUE_MAX} events behind")
            return
        self._queue.put((event, dedup_key(event) if dedup else None))

    def _wait_for_room(self) -> bool:
        """Until the writer has taken half of what waits (True), or cannot: it is the caller
        (a reader in the writer's own thread), or it has stopped (False)."""
        writer = self._writer
        if threading.current_thread() is writer.thread:
            return False
        writer.hurry.set()  # no linger: it is behind
        while self._queue.qsize() >= QUEUE_MAX // 2:
            if self._closed or not writer.thread.is_alive():
                return False
            writer.room.clear()
            if self._queue.qsize() < QUEUE_MAX // 2:  # drained between the look and the clear
                break
            writer.room.wait(ROOM_WAIT_S)
        return True

    def extend(self, events: Iterable[Event], *, dedup: bool = False, wait: bool = False) -> None:
        """:meth:`append` each of ``events``."""
        # append()'s common case inline, no call per event (a bulk load enqueues thousands);
        # anything else (closed, the queue full) goes through append() itself.
        put, qsize = self._queue.put, self._queue.qsize
        for ev in events:
            if self._closed or qsize() >= QUEUE_MAX:
                self.append(ev, dedup=dedup, wait=wait)
            else:
                put((ev, dedup_key(ev) if dedup else None))

    def put_meta(self, key: str, value: str) -> None:
        """Keep ``value`` under ``key`` (an ingest offset), written by the writer after every
        event enqueued before it: a checkpoint never says more was recorded than was."""
        if not self._closed:
            self._queue.put(Meta(key, value))

    def forget_meta(self, key: str) -> None:
        """Delete what is kept under ``key`` (the checkpoint of a file that is gone), in order
        with the events and values enqueued before it, as :meth:`put_meta`."""
        if not self._closed:
            self._queue.put(Meta(key, None))

    def flush(
        self, timeout: float | None = 30.0, *, failing_wait_s: float = CLOSE_WAIT_FAILING_S
    ) -> bool:
        """Wait until everything enqueued so far is committed (or counted lost): True once it
        is, False after ``timeout``, or after ``failing_wait_s`` of it while the file cannot be
        written (a program does not hang on a full disk; one that flushes on its event loop,
        as a watchdog beside a runtime does after each recovery, passes 0)."""
        if self._closed:
            return True
        writer = self._writer
        if not writer.thread.is_alive():  # what it left in the queue is not written
            return self._queue.qsize() == 0 and not writer.backlog
        if self.failing is not None and failing_wait_s <= 0:
            return False  # an outage under way: what waits is in the backlog, in order
        done = threading.Event()
        self._queue.put(done)
        writer.hurry.set()
        deadline = None if timeout is None else time.monotonic() + timeout
        failing_since: float | None = None
        while not done.wait(0.1):
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            if self.failing is None:
                failing_since = None
            elif failing_since is None:
                failing_since = now
            elif now - failing_since >= failing_wait_s:
                return False
        return True

    def close(self) -> None:
        """Flush and stop the writer; idempotent, and registered to run at exit."""
        if self._closed:
            return
        # A file that cannot be written gets a few seconds more (flush's own bound), not the
        # whole wait: what still waits then is counted lost, and said.
        self.flush()
        self._closed = True
        self._queue.put(None)
        self._writer.thread.join(timeout=30)
        with contextlib.suppress(sqlite3.Error):
            self._writer.conn.close()
        held_files.release(self.path)
        atexit.unregister(self.close)


#: The writer's tunables, in :mod:`turnwatch.tracing.ledger_writer` since the writer is;
#: importing one from here warns (kept through 0.2).
_MOVED = frozenset(
    {
        "LINGER_BELOW",
        "LINGER_S",
        "WRITE_RETRIES",
        "DROPPED_SESSIONS_MAX",
        "RETRY_FIRST_S",
        "RETRY_MAX_S",
    }
)


def __getattr__(name: str) -> object:
    if name in _MOVED:
        from turnwatch.tracing import ledger_writer

        warnings.warn(
            f"turnwatch.tracing.ledger.{name} is deprecated: use "
            f"turnwatch.tracing.ledger_writer.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(ledger_writer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
