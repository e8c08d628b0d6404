"""The ledger: every event, append-only, in a SQLite file (WAL).

The stop path only enqueues: one writer thread commits in batches, so the event loop never waits
on disk. Readers in other processes (the CLI, the watchdog) read while it writes. Besides the
events, the writer maintains two summary tables (``sessions``, ``calls``) in the same
transaction, so the derived view stays fast on big ledgers. The file itself (its schema, opening
it, reading and writing batches) is :mod:`turnwatch.tracing.ledger_file`, whose names this module
exports too.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import itertools
import logging
import queue
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from turnwatch.runtime import held_files
from turnwatch.runtime.events import Event
from turnwatch.runtime.fold import Step, StepReader
from turnwatch.tracing import batchsql, codec
from turnwatch.tracing.dedup import dedup_key
from turnwatch.tracing.gaps import Gap as _Gap
from turnwatch.tracing.gaps import note_gap as _note_gap
from turnwatch.tracing.ledger_file import (
    APPLICATION,
    BUSY_TIMEOUT_S,
    SCHEMA_VERSION,
    LedgerError,
    LedgerNotReady,
    connect,
    damaged,
    file_id,
    get_meta,
    meta_keys,
    read_events,
    write_batch,
)
from turnwatch.tracing.past_calls import BUSY_TIMEOUT_S_PAST, LedgerCalls
from turnwatch.tracing.paths import default_path
from turnwatch.tracing.stages import Reader, Stages
from turnwatch.tracing.summary import Summary

log = logging.getLogger("turnwatch.ledger")

#: Events a batch takes at most: whole bound ``VALUES`` statements (:data:`batchsql.MAX_ROWS`
#: rows each), so a writer behind leaves no remainder to the slower JSON path (2,000 left 464
#: rows of each batch to it: 3,200 more instructions per event, by callgrind).
BATCH_MAX = 4 * batchsql.MAX_ROWS
#: With fewer events than this waiting, the writer sleeps LINGER_S first, to let a batch gather.
LINGER_BELOW = 256
LINGER_S = 0.005
#: How often the writer retries a batch SQLite refused for a reason no wait will mend (a
#: constraint, a corrupt file) before it writes its events one by one, losing only those that
#: cannot be written at all.
WRITE_RETRIES = 3
#: Events the writer keeps, in order, while the file cannot be written (a full disk, a locked or
#: read-only file): past this, the oldest are dropped and counted lost. About 100 MB at most.
BACKLOG_MAX = 100_000
#: Events enqueued and not yet taken by the writer (the loop outpacing it: a slow disk, a reader
#: stuck in the writer thread): past this, new events are dropped, counted lost, and marked by a
#: ``ledger.gap`` per session once the writer catches up. About 100 MB at most.
QUEUE_MAX = 100_000
DROPPED_SESSIONS_MAX = 10_000
#: A producer waiting for the writer (``append(wait=True)``) is woken by it as it drains the
#: queue; past this it looks whether the writer still runs at all.
ROOM_WAIT_S = 0.5
#: How long a flush (and so ``close()``, which then counts what waits lost) waits for a file
#: that cannot be written.
CLOSE_WAIT_FAILING_S = 5.0


def _of_the_file(exc: sqlite3.Error) -> bool:
    """An error the file causes, not an event (a full disk, a lock, a read-only or damaged
    file): what comes waits for it to mend; an event's error loses that event alone."""
    return isinstance(exc, sqlite3.OperationalError) or damaged(exc)


#: The writer's first and longest wait between tries while the file cannot be written.
RETRY_FIRST_S, RETRY_MAX_S = 0.05, 2.0

__all__ = [
    "APPLICATION",
    "BACKLOG_MAX",
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


@dataclass(frozen=True, slots=True)
class _Meta:
    """A value to keep beside the events (a queue item: written after what came before it)."""

    key: str
    value: str | None  # None: the key is deleted


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
        # Span builder and observers, run here in the writer thread (never on the event loop).
        self.stages: Stages | None = None
        if transform is not None or observers:
            warnings.warn(
                "Ledger(transform=, observers=) is deprecated: wire readers with "
                "Telemetry(ledger=, spans=, observers=)",
                DeprecationWarning,
                stacklevel=2,
            )
            self.attach(Stages(transform, observers))
        self._busy_timeout_s = busy_timeout_s
        self._conn = connect(self.path, busy_timeout_s=busy_timeout_s)
        # This process's own file tools must not open it (closing it would drop its locks).
        held_files.hold(self.path)
        self._file = file_id(self.path)  # the file this writer writes (checked at each batch)
        self._summary = Summary()
        self._queue: queue.SimpleQueue[
            tuple[Event, str | None] | _Meta | threading.Event | None
        ] = queue.SimpleQueue()
        # Events that could not be written (past the backlog's bound, or a batch no wait mends),
        # and why the last of them was lost.
        self.lost = 0
        self.lost_why = ""
        # What append() dropped, the writer being QUEUE_MAX behind (per session, as _gaps), and
        # whether that was said; both threads write them, under the lock.
        self._lock = threading.Lock()
        self._dropped: dict[str, _Gap] = {}
        self._dropping = False
        # Events that wait, in order, while the file cannot be written; and flushes waiting for
        # them. Owned by the writer thread.
        self._backlog: collections.deque[tuple[Event, str | None]] = collections.deque()
        # Per session, what the backlog's bound dropped since the file last took a write: how
        # many, the first and the last one's time. Written as ``ledger.gap`` events ahead of
        # what still waits, where the lost events would have been. Bounded by the backlog.
        self._gaps: dict[str, _Gap] = {}
        self._waiters: list[threading.Event] = []
        # Why the file cannot be written now (said once per outage), and the next wait.
        self.failing: str | None = None
        self._retry_s = RETRY_FIRST_S
        # What the readers made of each event (its stamped copy) while it waits: a failed try
        # folds it again, but the span builder and the metrics must see it once. By id: the
        # event itself is alive in the batch or the backlog; dropped once written or lost.
        self._read: dict[int, Event] = {}
        # Events committed by this writer.
        self.written = 0
        self._closed = False
        # Set by flush(): the writer cuts its linger short, so a flush costs no extra wait.
        self._hurry = threading.Event()
        # Set by the writer once under half of QUEUE_MAX waits: producers that wait for room.
        self._room = threading.Event()
        self._thread = threading.Thread(target=self._run, name="turnwatch-ledger", daemon=True)
        self._thread.start()
        atexit.register(self.close)

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
        self.stages = stages

    def append(self, event: Event, *, dedup: bool = False, wait: bool = False) -> None:
        """Enqueue one event (never blocks on disk).

        Past :data:`QUEUE_MAX` events waiting for the writer, a producer that must never block
        (the runtime's event loop) has the event dropped, counted and marked by a gap; one that
        may wait (``wait=True``: ``ingest`` reading a file, a request of the events API) waits
        until the writer has taken half of them, and loses nothing.
        """
        if self._closed:
            self._lose(1, "ledger closed")
            return
        if self._queue.qsize() >= QUEUE_MAX and not (wait and self._wait_for_room()):
            self._drop(event)
            return
        self._queue.put((event, dedup_key(event) if dedup else None))

    def _wait_for_room(self) -> bool:
        """Until the writer has taken half of what waits (True), or cannot: it is the caller
        (a reader in the writer's own thread), or it has stopped (False)."""
        if threading.current_thread() is self._thread:
            return False
        self._hurry.set()  # no linger: it is behind
        while self._queue.qsize() >= QUEUE_MAX // 2:
            if self._closed or not self._thread.is_alive():
                return False
            self._room.clear()
            if self._queue.qsize() < QUEUE_MAX // 2:  # drained between the look and the clear
                break
            self._room.wait(ROOM_WAIT_S)
        return True

    def _drop(self, event: Event) -> None:
        """The writer is QUEUE_MAX events behind: ``event`` is lost, and its gap kept."""
        why = f"the writer was more than {QUEUE_MAX} events behind"
        with self._lock:
            self.lost += 1
            self.lost_why = why
            _note_gap(self._dropped, event, why)
            said, self._dropping = self._dropping, True
        if not said:  # once per episode; the writer says the total when it catches up
            log.error("turnwatch ledger %s: %s; dropping new events", self.path, why)

    def _take_dropped(self, stop: bool = False) -> None:
        """Move what append() dropped into the gaps the writer writes (writer thread): once
        what was queued before the drops is written (the gaps then sit where the events would
        have), or sooner if they span many sessions."""
        if not self._dropped or not (
            stop or self._queue.qsize() == 0 or len(self._dropped) > DROPPED_SESSIONS_MAX
        ):
            return
        with self._lock:
            dropped, self._dropped, self._dropping = self._dropped, {}, False
        for session, gap in dropped.items():
            mine = self._gaps.get(session)
            if mine is None:
                self._gaps[session] = gap
            else:
                mine.merge(gap)
        n = sum(g.lost for g in dropped.values())
        why = next(iter(dropped.values())).why
        log.error("turnwatch ledger %s: %d event(s) were dropped: %s", self.path, n, why)

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
            self._queue.put(_Meta(key, value))

    def forget_meta(self, key: str) -> None:
        """Delete what is kept under ``key`` (the checkpoint of a file that is gone), in order
        with the events and values enqueued before it, as :meth:`put_meta`."""
        if not self._closed:
            self._queue.put(_Meta(key, None))

    def flush(
        self, timeout: float | None = 30.0, *, failing_wait_s: float = CLOSE_WAIT_FAILING_S
    ) -> bool:
        """Wait until everything enqueued so far is committed (or counted lost): True once it
        is, False after ``timeout``, or after ``failing_wait_s`` of it while the file cannot be
        written (a program does not hang on a full disk; one that flushes on its event loop,
        as a watchdog beside a runtime does after each recovery, passes 0)."""
        if self._closed:
            return True
        if not self._thread.is_alive():  # what it left in the queue is not written
            return self._queue.qsize() == 0 and not self._backlog
        if self.failing is not None and failing_wait_s <= 0:
            return False  # an outage under way: what waits is in the backlog, in order
        done = threading.Event()
        self._queue.put(done)
        self._hurry.set()
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
        self._thread.join(timeout=30)
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        held_files.release(self.path)
        atexit.unregister(self.close)

    def _lose(self, n: int, why: str) -> None:
        with self._lock:
            self.lost += n
            self.lost_why = why
        log.error("turnwatch ledger %s: %d event(s) could not be written: %s", self.path, n, why)

    def _run(self) -> None:
        while True:
            try:
                self._serve()
                return
            except Exception:
                # A defect of the writer's own, never the file's (that waits in the backlog) nor
                # an event's (lost alone, in _one_by_one): said loudly, and the writer goes on.
                # A writer that died lost every event after it while flush() said all was well.
                log.exception("turnwatch ledger %s: the writer failed; it goes on", self.path)
                time.sleep(0.1)

    def _serve(self) -> None:
        while True:
            if self._backlog:
                # The file could not be written: wait before trying again, taking in what comes
                # meanwhile (behind what waits, so the order holds).
                try:
                    item = self._queue.get(timeout=self._retry_s)
                except queue.Empty:
                    self._retry()
                    self._release()
                    continue
            else:
                item = self._queue.get()
            # An event, not a flush marker, a meta value or the stop.
            is_event = isinstance(item, tuple)
            if is_event and self._queue.qsize() < LINGER_BELOW:
                # Let a batch gather before draining: a transaction per trickled event would
                # cost more than the events. The wait holds no GIL, so the event loop runs on;
                # it never waits on this, and a flush() cuts it short.
                self._hurry.wait(LINGER_S)
                self._hurry.clear()
            batch, metas, waiters, stop = self._drain(item)
            if self._queue.qsize() < QUEUE_MAX // 2:
                self._room.set()  # producers waiting for room (append(wait=True)) go on
            self._waiters += waiters
            if batch and not self._backlog and self._commit(batch):
                pass  # the usual case: written at once, nothing waits
            elif batch:
                self._backlog.extend(batch)  # behind what waits, so the order holds
                self._bound()
            self._take_dropped(stop)
            if (self._backlog or self._gaps) and (not self.failing or stop):
                self._retry()
            if metas:
                self._put_metas(metas)
            if stop:
                if self._backlog:
                    self._lose(len(self._backlog), f"closed while {self.failing}")
                    self._backlog.clear()
                    self._read.clear()
                self._release()
                return
            self._release()

    def _release(self) -> None:
        """Wake the flushes waiting, once nothing enqueued before them waits any more."""
        if not self._backlog:
            for w in self._waiters:
                w.set()
            self._waiters.clear()

    def _retry(self) -> None:
        """Write what waits, oldest first, a batch at a time, until it is done or fails."""
        self._take_dropped()
        if self._gaps:  # what was dropped came before what waits: its gaps go first
            if not self._commit([(gap.event(s), None) for s, gap in self._gaps.items()]):
                self._retry_s = min(self._retry_s * 2, RETRY_MAX_S)
                return
            self._gaps.clear()
        while self._backlog:
            batch = list(itertools.islice(self._backlog, BATCH_MAX))  # deque indexing is O(n)
            n = len(batch)
            written = self._commit(batch)
            # Written (or lost alone, said): all of it, or what _one_by_one cut from its front.
            for _ in range(n if written else n - len(batch)):
                self._backlog.popleft()
            if not written:
                self._retry_s = min(self._retry_s * 2, RETRY_MAX_S)
                return
        if self.failing is not None:
            log.warning("turnwatch ledger %s: writing again (%s is over)", self.path, self.failing)
        self.failing = None
        self._retry_s = RETRY_FIRST_S

    def _forget_read(self, batch: list[tuple[Event, str | None]]) -> None:
        if self._read:
            for ev, _key in batch:
                self._read.pop(id(ev), None)

    def _bound(self) -> None:
        over = len(self._backlog) - BACKLOG_MAX
        if over > 0:  # the oldest go: what is newest says most about what is live now
            for _ in range(over):
                ev, _key = self._backlog.popleft()
                self._read.pop(id(ev), None)
                _note_gap(self._gaps, ev, self.failing)
            self._lose(over, f"{self.failing}: more than {BACKLOG_MAX} events waited")

    def _drain(
        self, item: tuple[Event, str | None] | _Meta | threading.Event | None
    ) -> tuple[list[tuple[Event, str | None]], dict[str, str | None], list[threading.Event], bool]:
        """``item`` and what is queued behind it, up to a batch: events, meta values (the last
        per key counts), flush waiters, and whether to stop."""
        batch: list[tuple[Event, str | None]] = []
        waiters: list[threading.Event] = []
        metas: dict[str, str | None] = {}
        stop = False
        get = self._queue.get_nowait
        while True:
            if type(item) is tuple:  # an event: by far the most, so looked for first
                batch.append(item)
                if len(batch) >= BATCH_MAX:
                    break
            elif item is None:
                stop = True
            elif isinstance(item, threading.Event):
                waiters.append(item)
            else:
                assert isinstance(item, _Meta)
                metas[item.key] = item.value
            try:
                item = get()
            except queue.Empty:
                break
        return batch, metas, waiters, stop

    def _reopen(self) -> bool:
        """The file was deleted or replaced under the writer (whose writes would go to a file
        no reader sees): open the path again, a new ledger or the one now there. False while it
        cannot (its directory gone, a read-only volume): what waits waits, said once."""
        what = "deleted" if file_id(self.path) is None else "replaced"
        # The old file's WAL first, into the old file (through the connection's descriptor:
        # a file moved away keeps what was committed), and emptied: SQLite leaves the WAL of a
        # moved file where it was, and a new file at the path would take its frames for its own.
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._conn.close()
        try:
            conn = connect(self.path, busy_timeout_s=self._busy_timeout_s)
        except (LedgerError, OSError, sqlite3.Error) as exc:
            if self.failing is None:
                self.failing = f"the file was {what} and cannot be opened again: {exc}"
                log.warning("turnwatch ledger %s: %s; retrying", self.path, self.failing)
            return False
        self._conn, self._file = conn, file_id(self.path)
        self._summary.forget()  # its rows were the old file's
        log.warning(
            "turnwatch ledger %s: the file was %s under the writer; writing there again",
            self.path,
            what,
        )
        return True

    def _put_metas(self, metas: dict[str, str | None]) -> None:
        try:
            self._conn.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                codec.storable_rows([(k, v) for k, v in metas.items() if v is not None]),
            )
            self._conn.executemany(
                "DELETE FROM meta WHERE key = ?",
                codec.storable_rows([(k,) for k, v in metas.items() if v is None]),
            )
        except Exception as exc:  # a checkpoint lost re-reads lines; dedup keeps them once
            log.error("turnwatch ledger %s: could not keep %s: %s", self.path, sorted(metas), exc)

    def _commit(self, batch: list[tuple[Event, str | None]]) -> bool:
        """Write ``batch``: False if the file cannot be written now (the batch still waits)."""
        # Each event is read once, even if the write is retried: a retry folds the rows again
        # but must not build a span twice (nor count a metric twice).
        staged = self._read
        stages = self.stages

        def read(st: Step) -> Event:
            # By the event as enqueued: reading replaces st.ev with its stamped copy (and the
            # right-hand side of an assignment runs before its subscript).
            key = id(st.ev)
            done = staged.get(key)
            if done is None:
                assert stages is not None
                done = staged[key] = stages.on_step(st)
            return done

        if file_id(self.path) != self._file and not self._reopen():
            return False
        reader = read if stages else None
        for attempt in range(WRITE_RETRIES):
            try:
                self.written += write_batch(self._conn, self._summary, batch, reader)
                self._forget_read(batch)
                return True
            except sqlite3.Error as exc:
                if _of_the_file(exc):
                    self._cannot_write(exc)
                    return False
                if attempt == WRITE_RETRIES - 1:
                    return self._one_by_one(batch, reader)
                time.sleep(0.05 * (attempt + 1))
            except Exception:  # what an event holds (a caller's bug): no retry mends it
                return self._one_by_one(batch, reader)
        return True

    def _cannot_write(self, exc: sqlite3.Error) -> None:
        """A full disk, a locked, read-only or damaged file: it can mend (a damaged one moved
        aside, the writer writes at its path again). The batch waits in the backlog, in order;
        the cause is said once per outage."""
        if self.failing is None:
            self.failing = str(exc)
            log.warning(
                "turnwatch ledger %s: cannot write (%s); %d event(s) waiting, retrying",
                self.path,
                exc,
                len(self._backlog),
            )

    def _one_by_one(
        self, batch: list[tuple[Event, str | None]], reader: Callable[[Step], Event] | None
    ) -> bool:
        """A batch refused for what one of its events holds: each event written alone, so only
        an event that cannot be written at all is lost, counted and said with its cause (the
        batch of up to BATCH_MAX was lost whole, or the writer died). False if the file cannot
        be written now: ``batch`` is cut to what still waits."""
        done = 0
        try:
            for item in batch:
                try:
                    self.written += write_batch(self._conn, self._summary, [item], reader)
                except Exception as exc:
                    if isinstance(exc, sqlite3.Error) and _of_the_file(exc):
                        self._cannot_write(exc)
                        return False
                    ev = item[0]
                    why = f"{ev.kind!r} of session {ev.session!r}: {type(exc).__name__}: {exc}"
                    self._lose(1, why)
                self._read.pop(id(item[0]), None)
                done += 1
        finally:
            del batch[:done]
        return True
