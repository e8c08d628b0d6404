"""The ledger: every event, append-only, in a SQLite file (WAL).

The stop path only enqueues: one writer thread commits in batches, so the event loop never waits
on disk. Readers in other processes (the CLI, the watchdog) read while it writes. Besides the
events, the writer maintains two summary tables (``sessions``, ``calls``) in the same
transaction, so the derived view stays fast on big ledgers.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import hashlib
import itertools
import logging
import os
import queue
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnwatch.runtime.events import Event
from turnwatch.runtime.fold import Step, StepReader
from turnwatch.runtime.model import TurnwatchError
from turnwatch.tracing import batchsql, codec
from turnwatch.tracing.paths import default_path
from turnwatch.tracing.stages import Reader, Stages
from turnwatch.tracing.summary import COLUMNS, Summary

log = logging.getLogger("turnwatch.ledger")

#: 2 added the calls' containment columns; 3 the fold's stop and abort instants (rpc_ts,
#: walk_ts, stop_mono, abort_mono, done_ts). A writer adds what an older ledger lacks.
SCHEMA_VERSION = 4
APPLICATION = "turnwatch"
BATCH_MAX = 2000
#: With fewer events than this waiting, the writer sleeps LINGER_S first, to let a batch gather.
LINGER_BELOW = 256
LINGER_S = 0.005
#: How often the writer retries a batch that failed for a reason no wait will mend (a corrupt
#: file, a bug) before it counts the events lost.
WRITE_RETRIES = 3
#: Events the writer keeps, in order, while the file cannot be written (a full disk, a locked or
#: read-only file): past this, the oldest are dropped and counted lost. About 100 MB at most.
BACKLOG_MAX = 100_000
#: How long a flush (and so ``close()``, which then counts what waits lost) waits for a file
#: that cannot be written.
CLOSE_WAIT_FAILING_S = 5.0
#: The writer's first and longest wait between tries while the file cannot be written.
RETRY_FIRST_S, RETRY_MAX_S = 0.05, 2.0
BUSY_TIMEOUT_S = 5.0

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ts_unix REAL NOT NULL,
    mono_ns INTEGER,
    session TEXT NOT NULL,
    turn TEXT,
    call TEXT,
    tool TEXT,
    kind TEXT NOT NULL,
    attrs_json TEXT NOT NULL DEFAULT '{}',
    trace_id TEXT,
    span_id TEXT
);
-- One index serves a session's events and a turn's timeline (session, turn prefix).
CREATE INDEX IF NOT EXISTS events_by_turn ON events (session, turn, seq);
-- Identities of ingested foreign events (re-ingest adds nothing); native events pay nothing.
CREATE TABLE IF NOT EXISTS ingested (key TEXT PRIMARY KEY) WITHOUT ROWID;
"""
    + Summary.SCHEMA
)


class LedgerError(TurnwatchError):
    """A ledger that cannot be used; the message names the file and the cause."""


def get_meta(conn: sqlite3.Connection, key: str) -> str | None:
    """A value the ledger keeps beside its events (an ingest offset), or None."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


@dataclass(frozen=True, slots=True)
class _Meta:
    """A value to keep beside the events (a queue item: written after what came before it)."""

    key: str
    value: str


def dedup_key(ev: Event) -> str:
    """A stable identity for an ingested event: ingesting a file twice adds nothing twice."""
    body = codec.dumps_canonical(
        [ev.ts_unix, ev.kind, ev.session, ev.turn, ev.call, ev.tool, dict(ev.attrs)]
    )
    return hashlib.blake2b(body, digest_size=16).hexdigest()


def _check(conn: sqlite3.Connection, path: Path, *, readonly: bool) -> None:
    """Refuse a foreign or newer file: never write into it."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables:
        if readonly:  # a writer is creating it, or it is an empty file: nothing to read yet
            raise LedgerError(f"{path}: not a turnwatch ledger yet (no tables)")
        return
    if "meta" not in tables:
        raise LedgerError(f"{path}: not a turnwatch ledger (tables: {', '.join(sorted(tables))})")
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("application") != APPLICATION:
        raise LedgerError(
            f"{path}: not a turnwatch ledger (application {meta.get('application')!r})"
        )
    version = int(meta.get("schema_version", "0"))
    if version > SCHEMA_VERSION:
        raise LedgerError(
            f"{path}: written by a newer turnwatch (schema {version}, this one "
            f"reads {SCHEMA_VERSION}); upgrade turnwatch"
        )


def _upgrade(conn: sqlite3.Connection) -> None:
    """Bring an older ledger's tables up to this schema, in the creating transaction."""
    for table, wanted in COLUMNS.items():
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        if not have:
            continue  # a new file: the schema below creates it whole
        for col in wanted:
            if col not in have:
                conn.execute(f'ALTER TABLE {table} ADD COLUMN "{col}"')


def _statements(script: str) -> list[str]:
    """The statements of an SQL script (whole-line ``--`` comments allowed)."""
    out, buf = [], ""
    for line in script.splitlines():
        if line.lstrip().startswith("--"):
            continue
        buf += line + "\n"
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    return out


def connect(
    path: Path, *, readonly: bool = False, busy_timeout_s: float = BUSY_TIMEOUT_S
) -> sqlite3.Connection:
    """A checked connection; errors name the file and the cause.

    Read-only, nothing is ever written, not even the WAL's shared-memory file where the directory
    is not writable. A writer checks that an existing file is a ledger before it changes anything
    (the journal mode included): someone else's database is refused untouched.
    """
    if path.is_dir():
        raise LedgerError(f"{path}: is a directory, not a ledger file")
    try:
        if readonly:
            if not path.exists():
                raise LedgerError(f"{path}: no ledger here (set --ledger or $TURNWATCH_LEDGER)")
            with open(path, "rb"):  # unreadable: say so plainly, before SQLite's words for it
                pass
            conn = _open_readonly(path, busy_timeout_s)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                path, timeout=busy_timeout_s, check_same_thread=False, isolation_level=None
            )
        conn.row_factory = sqlite3.Row
        if readonly:
            _check(conn, path, readonly=True)
            return conn
        try:
            _check(conn, path, readonly=False)  # before the WAL switch below changes the file
        except LedgerError:
            conn.close()
            raise
        unable = batchsql.check(conn)
        if unable is not None:
            conn.close()
            raise LedgerError(f"{path}: cannot write here: {unable}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        # Check and create in one transaction: a reader sees no schema or all of it with its
        # meta rows, and two writers creating the same file at once do it one after the other.
        conn.execute("BEGIN IMMEDIATE")
        try:
            _check(conn, path, readonly=False)
            _upgrade(conn)
            for statement in _statements(_SCHEMA):  # not executescript: it would COMMIT
                conn.execute(statement)
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('application', ?)", (APPLICATION,))
            conn.execute(
                "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return conn
    except sqlite3.DatabaseError as exc:
        why = None if readonly else _unwritable(path)
        if why is not None:  # readable, perhaps, but a writer cannot work here: say that
            raise LedgerError(f"{path}: cannot write here ({why})") from None
        raise LedgerError(f"{path}: unreadable ledger ({exc})") from None
    except OSError as exc:
        raise LedgerError(f"{path}: cannot open ({exc.strerror or exc})") from None


def _unwritable(path: Path) -> str | None:
    """Why a writer cannot work at ``path`` (a read-only file system, a file or directory it may
    not write), or None."""
    with contextlib.suppress(OSError):
        if os.statvfs(path.parent).f_flag & os.ST_RDONLY:
            return "read-only file system"
    for where in (path, path.parent):
        if where.exists() and not os.access(where, os.W_OK):
            return f"{where} is not writable"
    return None


def _open_readonly(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    """``mode=ro``; where the directory is read-only (no ``-shm`` can be made), ``immutable``:
    then no writer can be at work in it either."""
    conn = sqlite3.connect(
        f"file:{path}?mode=ro", uri=True, timeout=busy_timeout_s, check_same_thread=False
    )
    if os.access(path.parent, os.W_OK):
        return conn
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError:
        conn.close()
        return sqlite3.connect(
            f"file:{path}?mode=ro&immutable=1",
            uri=True,
            timeout=busy_timeout_s,
            check_same_thread=False,
        )


def _row(ev: Event) -> tuple[Any, ...]:
    return (
        ev.ts_unix,
        ev.mono_ns,
        ev.session,
        ev.turn,
        ev.call,
        ev.tool,
        ev.kind,
        codec.dumps_attrs(ev.attrs) if ev.attrs else "{}",
        ev.trace_id,
        ev.span_id,
    )


_EVENT_COLS = (
    "ts_unix",
    "mono_ns",
    "session",
    "turn",
    "call",
    "tool",
    "kind",
    "attrs_json",
    "trace_id",
    "span_id",
)
_INSERT_EVENTS = batchsql.Insert("events", _EVENT_COLS)
_INSERT_KEYS = batchsql.Insert("ingested", ("key",))
# Keys are hex digests: never a NUL, and one aggregated row answers the whole batch.
_SEEN_KEYS = (
    "SELECT json_group_array(key) FROM ingested WHERE key IN (SELECT value FROM json_each(?))"
)


def write_batch(
    conn: sqlite3.Connection,
    summary: Summary,
    batch: list[tuple[Event, str | None]],
    read: Callable[[Step], Event] | None = None,
) -> int:
    """Insert a batch and update the summaries in one transaction; returns rows added.

    Ingested events (with a dedup key) already in the ledger are skipped. The check runs inside
    the write transaction, so two writers ingesting the same lines cannot both pass it. Only the
    events it accepts are folded and given to ``read`` (spans, metrics: it returns the event to
    record, stamped): a file ingested twice builds its spans once. Each table gets one statement
    per batch (see :mod:`batchsql`).
    """
    keys = [key for _ev, key in batch if key is not None]
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Native events carry no key: nothing to check, the whole batch is fresh.
        events = _unseen(conn, batch, keys) if keys else [ev for ev, _key in batch]
        if events:
            events = summary.apply(conn, events, read)
            _INSERT_EVENTS(conn, [_row(ev) for ev in events])
        conn.execute("COMMIT")
    except BaseException:
        summary.forget()  # its rows are ahead of the file now
        # SQLite ends the transaction itself on some errors (a full disk): a ROLLBACK then
        # raises "no transaction is active" and hides the real cause.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return len(events)


def _unseen(
    conn: sqlite3.Connection, batch: list[tuple[Event, str | None]], keys: list[str]
) -> list[Event]:
    """The batch's events not in the ledger yet; records the new keys."""
    (found,) = conn.execute(_SEEN_KEYS, (codec.dumps_rows(keys),)).fetchone()
    seen: set[str] = set(codec.loads(found))
    fresh: list[Event] = []
    new_keys: list[tuple[str]] = []
    for ev, key in batch:
        if key is not None:
            if key in seen:
                continue
            seen.add(key)  # the same line twice in one batch counts once too
            new_keys.append((key,))
        fresh.append(ev)
    _INSERT_KEYS(conn, new_keys)
    return fresh


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
        self._conn = connect(self.path, busy_timeout_s=busy_timeout_s)
        self._summary = Summary()
        self._queue: queue.SimpleQueue[
            tuple[Event, str | None] | _Meta | threading.Event | None
        ] = queue.SimpleQueue()
        # Events that could not be written (past the backlog's bound, or a batch no wait mends),
        # and why the last of them was lost.
        self.lost = 0
        self.lost_why = ""
        # Events that wait, in order, while the file cannot be written; and flushes waiting for
        # them. Owned by the writer thread.
        self._backlog: collections.deque[tuple[Event, str | None]] = collections.deque()
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
        self._thread = threading.Thread(target=self._run, name="turnwatch-ledger", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def __call__(self, event: Event) -> None:
        self.append(event)

    def attach(self, stages: Stages) -> None:
        """Give the writer its readers (once, before the first event: a reader that missed
        the stream's start would misread it)."""
        if self.stages is not None:
            raise ValueError(f"ledger {self.path} already has its readers")
        self.stages = stages

    def append(self, event: Event, *, dedup: bool = False) -> None:
        """Enqueue one event (never blocks on disk)."""
        if self._closed:
            self._lose(1, "ledger closed")
            return
        self._queue.put((event, dedup_key(event) if dedup else None))

    def extend(self, events: Iterable[Event], *, dedup: bool = False) -> None:
        for ev in events:
            self.append(ev, dedup=dedup)

    def put_meta(self, key: str, value: str) -> None:
        """Keep ``value`` under ``key`` (an ingest offset), written by the writer after every
        event enqueued before it: a checkpoint never says more was recorded than was."""
        if not self._closed:
            self._queue.put(_Meta(key, value))

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until everything enqueued so far is committed (or counted lost): True once it
        is, False after ``timeout``, or after :data:`CLOSE_WAIT_FAILING_S` of it while the file
        cannot be written (a program does not hang on a full disk)."""
        if self._closed or not self._thread.is_alive():
            return True
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
            elif now - failing_since >= CLOSE_WAIT_FAILING_S:
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
        atexit.unregister(self.close)

    def _lose(self, n: int, why: str) -> None:
        self.lost += n
        self.lost_why = why
        log.error("turnwatch ledger %s: %d event(s) could not be written: %s", self.path, n, why)

    def _run(self) -> None:
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
            self._waiters += waiters
            if batch and not self._backlog and self._commit(batch):
                pass  # the usual case: written at once, nothing waits
            elif batch:
                self._backlog.extend(batch)  # behind what waits, so the order holds
                self._bound()
            if self._backlog and (not self.failing or stop):
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
        while self._backlog:
            batch = list(itertools.islice(self._backlog, BATCH_MAX))  # deque indexing is O(n)
            n = len(batch)
            if not self._commit(batch):
                self._retry_s = min(self._retry_s * 2, RETRY_MAX_S)
                return
            for _ in range(n):
                self._backlog.popleft()
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
            self._lose(over, f"{self.failing}: more than {BACKLOG_MAX} events waited")

    def _drain(
        self, item: tuple[Event, str | None] | _Meta | threading.Event | None
    ) -> tuple[list[tuple[Event, str | None]], dict[str, str], list[threading.Event], bool]:
        """``item`` and what is queued behind it, up to a batch: events, meta values (the last
        per key counts), flush waiters, and whether to stop."""
        batch: list[tuple[Event, str | None]] = []
        waiters: list[threading.Event] = []
        metas: dict[str, str] = {}
        stop = False
        while True:
            if item is None:
                stop = True
            elif isinstance(item, threading.Event):
                waiters.append(item)
            elif isinstance(item, _Meta):
                metas[item.key] = item.value
            else:
                batch.append(item)
            if len(batch) >= BATCH_MAX:
                break
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
        return batch, metas, waiters, stop

    def _put_metas(self, metas: dict[str, str]) -> None:
        try:
            self._conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", metas.items())
        except sqlite3.Error as exc:  # a checkpoint lost re-reads lines; dedup keeps them once
            log.error("turnwatch ledger %s: could not keep %s: %s", self.path, sorted(metas), exc)

    def _commit(self, batch: list[tuple[Event, str | None]]) -> bool:
        """Write ``batch``: False if the file cannot be written now (the batch still waits)."""
        # Each event is read once, even if the write is retried: a retry folds the rows again
        # but must not build a span twice (nor count a metric twice).
        staged = self._read
        stages = self.stages

        def read(st: Step) -> Event:
            done = staged.get(id(st.ev))
            if done is None:
                assert stages is not None
                done = staged[id(st.ev)] = stages.on_step(st)
            return done

        for attempt in range(WRITE_RETRIES):
            try:
                self.written += write_batch(
                    self._conn, self._summary, batch, read if stages else None
                )
                self._forget_read(batch)
                return True
            except sqlite3.OperationalError as exc:
                # A full disk, a locked or read-only file: it can mend. The batch waits in the
                # backlog, in order; the cause is said once per outage.
                if self.failing is None:
                    self.failing = str(exc)
                    log.warning(
                        "turnwatch ledger %s: cannot write (%s); %d event(s) waiting, retrying",
                        self.path,
                        exc,
                        len(self._backlog),
                    )
                return False
            except sqlite3.Error as exc:
                if attempt == WRITE_RETRIES - 1:
                    self._lose(len(batch), str(exc))
                    self._forget_read(batch)
                    return True  # counted: nothing of it waits
                time.sleep(0.05 * (attempt + 1))
        return True


def read_events(
    conn: sqlite3.Connection,
    *,
    after_seq: int = 0,
    session: str | None = None,
    turn: str | None = None,
    limit: int | None = None,
) -> Iterator[tuple[int, Event]]:
    """Events in order, as ``(seq, Event)``."""
    sql = "SELECT * FROM events WHERE seq > ?"
    args: list[Any] = [after_seq]
    if session is not None:
        sql += " AND session = ?"
        args.append(session)
    if turn is not None:
        sql += " AND turn = ?"
        args.append(turn)
    sql += " ORDER BY seq"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    for r in conn.execute(sql, args):
        yield (
            r["seq"],
            Event(
                kind=r["kind"],
                session=r["session"],
                ts_unix=r["ts_unix"],
                mono_ns=r["mono_ns"],
                turn=r["turn"],
                call=r["call"],
                tool=r["tool"],
                attrs=codec.loads_stored(r["attrs_json"]),
                trace_id=r["trace_id"],
                span_id=r["span_id"],
            ),
        )
