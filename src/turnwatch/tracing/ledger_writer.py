"""The ledger's writer thread: it takes what :meth:`Ledger.append` enqueued, a batch at a time,
folds each event once, hands the step to the readers (spans, metrics) and commits the rows.

While the file cannot be written (a full disk, a lock, a read-only, damaged or vanished file) the
events wait here, in order, in a bounded backlog; past its bound the oldest are dropped, counted,
and marked by a ``ledger.gap`` per session, written where they would have been once the file takes
a write again. What the producer side (:mod:`turnwatch.tracing.ledger`) drops, the writer being
too far behind, is marked the same way: :class:`~turnwatch.tracing.gaps.Losses` is what both
sides count.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from turnwatch.runtime.events import Event
from turnwatch.runtime.fold import Step
from turnwatch.tracing import batchsql, codec
from turnwatch.tracing.gaps import Gap, Losses, note_gap
from turnwatch.tracing.ledger_batch import write_batch
from turnwatch.tracing.ledger_file import LedgerError, connect, damaged, file_id
from turnwatch.tracing.stages import Stages
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
#: Sessions whose dropped events wait for their gaps before the writer writes them at once.
DROPPED_SESSIONS_MAX = 10_000
#: The writer's first and longest wait between tries while the file cannot be written.
RETRY_FIRST_S, RETRY_MAX_S = 0.05, 2.0

#: An event as enqueued: the event and its dedup key (None: a native event, kept under none).
Queued = tuple[Event, str | None]


@dataclass(frozen=True, slots=True)
class Meta:
    """A value to keep beside the events (a queue item: written after what came before it)."""

    key: str
    value: str | None  # None: the key is deleted


#: What the queue carries: an event, a meta value, a flush's waiter, or None (stop).
Item = Queued | Meta | threading.Event | None


def _of_the_file(exc: sqlite3.Error) -> bool:
    """An error the file causes, not an event (a full disk, a lock, a read-only or damaged
    file): what comes waits for it to mend; an event's error loses that event alone."""
    return isinstance(exc, sqlite3.OperationalError) or damaged(exc)


class Writer:
    """The thread that commits what the queue carries; its state is its own (the producer
    reads ``failing``, ``written`` and ``backlog``, and waits on ``hurry`` and ``room``)."""

    def __init__(
        self,
        path: Path,
        conn: sqlite3.Connection,
        items: queue.SimpleQueue[Item],
        losses: Losses,
        *,
        busy_timeout_s: float,
        backlog_max: int,
        room_below: int,
    ) -> None:
        self.path = path
        self.conn = conn
        self._items = items
        self._losses = losses
        self._busy_timeout_s = busy_timeout_s
        self._backlog_max = backlog_max
        self._room_below = room_below
        self._file = file_id(path)  # the file this writer writes (checked at each batch)
        self._summary = Summary()
        #: The readers (span builder, observers), run here on each event's step.
        self.stages: Stages | None = None
        #: Events that wait, in order, while the file cannot be written.
        self.backlog: collections.deque[Queued] = collections.deque()
        # Per session, what the backlog's bound dropped since the file last took a write: how
        # many, the first and the last one's time. Written as ``ledger.gap`` events ahead of
        # what still waits, where the lost events would have been. Bounded by the backlog.
        self._gaps: dict[str, Gap] = {}
        # Flushes waiting for what was enqueued before them.
        self._waiters: list[threading.Event] = []
        #: Why the file cannot be written now (said once per outage), and the next wait.
        self.failing: str | None = None
        self._retry_s = RETRY_FIRST_S
        # What the readers made of each event (its stamped copy) while it waits: a failed try
        # folds it again, but the span builder and the metrics must see it once. By id: the
        # event itself is alive in the batch or the backlog; dropped once written or lost.
        self.read: dict[int, Event] = {}
        #: Events committed by this writer.
        self.written = 0
        #: Set by a flush: the writer cuts its linger short, so a flush costs no extra wait.
        self.hurry = threading.Event()
        #: Set once under ``room_below`` events wait: producers that wait for room go on.
        self.room = threading.Event()
        self.thread = threading.Thread(target=self._run, name="turnwatch-ledger", daemon=True)

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
            if self.backlog:
                # The file could not be written: wait before trying again, taking in what comes
                # meanwhile (behind what waits, so the order holds).
                try:
                    item = self._items.get(timeout=self._retry_s)
                except queue.Empty:
                    self._retry()
                    self._release()
                    continue
            else:
                item = self._items.get()
            # An event, not a flush marker, a meta value or the stop.
            is_event = isinstance(item, tuple)
            if is_event and self._items.qsize() < LINGER_BELOW:
                # Let a batch gather before draining: a transaction per trickled event would
                # cost more than the events. The wait holds no GIL, so the event loop runs on;
                # it never waits on this, and a flush() cuts it short.
                self.hurry.wait(LINGER_S)
                self.hurry.clear()
            batch, metas, waiters, stop = self._drain(item)
            if self._items.qsize() < self._room_below:
                self.room.set()  # producers waiting for room (append(wait=True)) go on
            self._waiters += waiters
            if batch and not self.backlog and self._commit(batch):
                pass  # the usual case: written at once, nothing waits
            elif batch:
                self.backlog.extend(batch)  # behind what waits, so the order holds
                self._bound()
            self._take_dropped(stop)
            if (self.backlog or self._gaps) and (not self.failing or stop):
                self._retry()
            if metas:
                self._put_metas(metas)
            if stop:
                if self.backlog:
                    self._losses.lose(len(self.backlog), f"closed while {self.failing}")
                    self.backlog.clear()
                    self.read.clear()
                self._release()
                return
            self._release()

    def _take_dropped(self, stop: bool = False) -> None:
        """Move what the producer dropped into the gaps written here: once what was queued
        before the drops is written (the gaps then sit where the events would have), or sooner
        if they span many sessions."""
        waiting = self._losses.dropped_sessions()
        if not waiting or not (stop or self._items.qsize() == 0 or waiting > DROPPED_SESSIONS_MAX):
            return
        dropped = self._losses.take_dropped()
        for session, gap in dropped.items():
            mine = self._gaps.get(session)
            if mine is None:
                self._gaps[session] = gap
            else:
                mine.merge(gap)
        if dropped:
            n = sum(g.lost for g in dropped.values())
            why = next(iter(dropped.values())).why
            log.error("turnwatch ledger %s: %d event(s) were dropped: %s", self.path, n, why)

    def _release(self) -> None:
        """Wake the flushes waiting, once nothing enqueued before them waits any more."""
        if not self.backlog:
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
        while self.backlog:
            batch = list(itertools.islice(self.backlog, BATCH_MAX))  # deque indexing is O(n)
            n = len(batch)
            written = self._commit(batch)
            # Written (or lost alone, said): all of it, or what _one_by_one cut from its front.
            for _ in range(n if written else n - len(batch)):
                self.backlog.popleft()
            if not written:
                self._retry_s = min(self._retry_s * 2, RETRY_MAX_S)
                return
        if self.failing is not None:
            log.warning("turnwatch ledger %s: writing again (%s is over)", self.path, self.failing)
        self.failing = None
        self._retry_s = RETRY_FIRST_S

    def _forget_read(self, batch: list[Queued]) -> None:
        if self.read:
            for ev, _key in batch:
                self.read.pop(id(ev), None)

    def _bound(self) -> None:
        over = len(self.backlog) - self._backlog_max
        if over > 0:  # the oldest go: what is newest says most about what is live now
            for _ in range(over):
                ev, _key = self.backlog.popleft()
                self.read.pop(id(ev), None)
                note_gap(self._gaps, ev, self.failing)
            self._losses.lose(over, f"{self.failing}: more than {self._backlog_max} events waited")

    def _drain(
        self, item: Item
    ) -> tuple[list[Queued], dict[str, str | None], list[threading.Event], bool]:
        """``item`` and what is queued behind it, up to a batch: events, meta values (the last
        per key counts), flush waiters, and whether to stop."""
        batch: list[Queued] = []
        waiters: list[threading.Event] = []
        metas: dict[str, str | None] = {}
        stop = False
        get = self._items.get_nowait
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
                assert isinstance(item, Meta)
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
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.conn.close()
        try:
            conn = connect(self.path, busy_timeout_s=self._busy_timeout_s)
        except (LedgerError, OSError, sqlite3.Error) as exc:
            if self.failing is None:
                self.failing = f"the file was {what} and cannot be opened again: {exc}"
                log.warning("turnwatch ledger %s: %s; retrying", self.path, self.failing)
            return False
        self.conn, self._file = conn, file_id(self.path)
        self._summary.forget()  # its rows were the old file's
        log.warning(
            "turnwatch ledger %s: the file was %s under the writer; writing there again",
            self.path,
            what,
        )
        return True

    def _put_metas(self, metas: dict[str, str | None]) -> None:
        try:
            self.conn.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                codec.storable_rows([(k, v) for k, v in metas.items() if v is not None]),
            )
            self.conn.executemany(
                "DELETE FROM meta WHERE key = ?",
                codec.storable_rows([(k,) for k, v in metas.items() if v is None]),
            )
        except Exception as exc:  # a checkpoint lost re-reads lines; dedup keeps them once
            log.error("turnwatch ledger %s: could not keep %s: %s", self.path, sorted(metas), exc)

    def _commit(self, batch: list[Queued]) -> bool:
        """Write ``batch``: False if the file cannot be written now (the batch still waits)."""
        # Each event is read once, even if the write is retried: a retry folds the rows again
        # but must not build a span twice (nor count a metric twice).
        staged = self.read
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
                self.written += write_batch(self.conn, self._summary, batch, reader)
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
                len(self.backlog),
            )

    def _one_by_one(self, batch: list[Queued], reader: Callable[[Step], Event] | None) -> bool:
        """A batch refused for what one of its events holds: each event written alone, so only
        an event that cannot be written at all is lost, counted and said with its cause (the
        batch of up to BATCH_MAX was lost whole, or the writer died). False if the file cannot
        be written now: ``batch`` is cut to what still waits."""
        done = 0
        try:
            for item in batch:
                try:
                    self.written += write_batch(self.conn, self._summary, [item], reader)
                except Exception as exc:
                    if isinstance(exc, sqlite3.Error) and _of_the_file(exc):
                        self._cannot_write(exc)
                        return False
                    ev = item[0]
                    why = f"{ev.kind!r} of session {ev.session!r}: {type(exc).__name__}: {exc}"
                    self._losses.lose(1, why)
                self.read.pop(id(item[0]), None)
                done += 1
        finally:
            del batch[:done]
        return True
