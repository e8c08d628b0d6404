"""The ledger's file: its schema, opening it (checked, upgraded, or read-only), and its meta.
The writer thread (:mod:`turnwatch.tracing.ledger`) is the one writer, a batch at a time
(:mod:`turnwatch.tracing.ledger_batch`); readers in other processes (the CLI, the watchdog) use
:func:`connect` and :func:`read_events`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from pathlib import Path

from turnwatch.runtime.events import storable_text
from turnwatch.runtime.model import TurnwatchError
from turnwatch.tracing import batchsql
from turnwatch.tracing.rows import read_events as read_events  # its home before rows
from turnwatch.tracing.rows import shadow_summaries
from turnwatch.tracing.summary import COLUMNS, Summary

#: 2 added the calls' containment columns; 3 the fold's stop and abort instants (rpc_ts,
#: walk_ts, stop_mono, abort_mono, done_ts); 4 the sessions' parent_session; 5 their gap_lost
#: and gap_ts (``ledger.gap``); 6 the kernel's start of each recorded process (start_ticks,
#: boot_id; runtime_start_ticks, runtime_boot_id). A writer adds what an older ledger lacks; a
#: reader sees what it lacks as NULL (``rows.shadow_summaries``). A column an older turnwatch
#: neither needs nor misreads comes without a new version (calls.cgroup_id: NULL where not
#: recorded): an older one refuses a newer version, and a fleet upgraded piecemeal (the runtime
#: first, the watchdog's unit still running the code it started with) would stop recovering.
SCHEMA_VERSION = 6
APPLICATION = "turnwatch"
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


class LedgerNotReady(LedgerError):
    """A file with no tables yet: a writer is creating it (or it is empty). A reader that
    watches the path sees no events yet, as if no file were there; one that must read it now
    says so and exits."""


def get_meta(conn: sqlite3.Connection, key: str) -> str | None:
    """A value the ledger keeps beside its events (an ingest offset), or None."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (storable_text(key),)).fetchone()
    return None if row is None else str(row[0])


def meta_keys(conn: sqlite3.Connection, prefix: str) -> list[str]:
    """Every key kept beside the events that starts with ``prefix`` (not empty), as kept
    (:func:`~turnwatch.runtime.events.storable_text`)."""
    start = storable_text(prefix)
    end = start[:-1] + chr(ord(start[-1]) + 1)  # by the key's index, not a scan
    return [
        str(r[0])
        for r in conn.execute("SELECT key FROM meta WHERE key >= ? AND key < ?", (start, end))
    ]


#: ``meta`` keys: set by a writer that opened a ledger holding keys written before they led
#: with the time (bare hashes), which each batch then looks up too; and that this check ran.
META_DEDUP_LEGACY = "dedup_legacy"
_META_DEDUP_KEYS = "dedup_keys"


def _check(conn: sqlite3.Connection, path: Path, *, readonly: bool) -> None:
    """Refuse a foreign or newer file: never write into it."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables:
        if readonly:  # a writer is creating it, or it is an empty file: nothing to read yet
            raise LedgerNotReady(f"{path}: not a turnwatch ledger yet (no tables)")
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


def _note_legacy_keys(conn: sqlite3.Connection) -> None:
    """Once per ledger: keys there before they led with the time are looked up in both forms
    from now on (a file ingested before the upgrade adds nothing twice)."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "meta" not in tables:
        return  # a new file: created below, with no old keys
    if get_meta(conn, _META_DEDUP_KEYS) is not None:
        return
    if "ingested" in tables and conn.execute("SELECT 1 FROM ingested LIMIT 1").fetchone():
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, '1')", (META_DEDUP_LEGACY,))
    conn.execute("INSERT OR REPLACE INTO meta VALUES (?, 'time')", (_META_DEDUP_KEYS,))


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
            return _look(path, busy_timeout_s)
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            path, timeout=busy_timeout_s, check_same_thread=False, isolation_level=None
        )
        conn.row_factory = sqlite3.Row
        try:
            _check(conn, path, readonly=False)  # before the WAL switch below changes the file
        except LedgerError:
            conn.close()
            raise
        unable = batchsql.check(conn)
        if unable is not None:
            conn.close()
            raise LedgerError(f"{path}: cannot write here: {unable}")
        _create(conn, path)
        return conn
    except sqlite3.DatabaseError as exc:
        why = None if readonly else _unwritable(path)
        if why is not None:  # readable, perhaps, but a writer cannot work here: say that
            raise LedgerError(f"{path}: cannot write here ({why})") from None
        raise LedgerError(f"{path}: unreadable ledger ({exc})") from None
    except OSError as exc:
        raise LedgerError(f"{path}: cannot open ({exc.strerror or exc})") from None


def _create(conn: sqlite3.Connection, path: Path) -> None:
    """A writer's file: WAL, and the schema created or brought up to date."""
    # A new file gives pruned pages back (tracing.prune); only settable before any table.
    if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    # Check and create in one transaction: a reader sees no schema or all of it with its
    # meta rows, and two writers creating the same file at once do it one after the other.
    conn.execute("BEGIN IMMEDIATE")
    try:
        _check(conn, path, readonly=False)
        _upgrade(conn)
        _note_legacy_keys(conn)
        for statement in _statements(_SCHEMA):  # not executescript: it would COMMIT
            conn.execute(statement)
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('application', ?)", (APPLICATION,))
        conn.execute("INSERT OR IGNORE INTO meta VALUES (?, 'time')", (_META_DEDUP_KEYS,))
        conn.execute(
            "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


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


def _look(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    """A checked read-only connection. A file it cannot use (truncated, corrupt, foreign) is
    left as it was found: the ``-wal`` and ``-shm`` SQLite made beside it to look are removed
    (looking changes no file)."""
    if not path.exists():
        raise LedgerError(f"{path}: no ledger here (set --ledger or $TURNWATCH_LEDGER)")
    # Unreadable: say so plainly, before SQLite's words for it. Asked, never by opening it: a
    # process loses every POSIX lock it holds on a file when it closes any descriptor of it,
    # SQLite's too, and a writer beside this look (the watchdog's, serve-metrics') would have
    # its WAL deleted by the next process to close the ledger, its commits seen by no one.
    if not os.access(path, os.R_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
    beside = [p for p in (Path(f"{path}-wal"), Path(f"{path}-shm")) if not p.exists()]
    conn = _open_readonly(path, busy_timeout_s)
    try:
        conn.row_factory = sqlite3.Row
        _check(conn, path, readonly=True)
        shadow_summaries(conn)  # a damaged summary row is skipped by every reader
    except BaseException as exc:
        conn.close()
        # A -wal with anything in it was written by a writer, not made by this look.
        if _refused(exc) and not any(p.name.endswith("-wal") and _size(p) for p in beside):
            for made in beside:
                made.unlink(missing_ok=True)
        raise
    return conn


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except FileNotFoundError:
        return 0


#: SQLite's verdicts on a file that is no database of anyone's (SQLITE_CORRUPT, SQLITE_NOTADB).
_NOT_A_DATABASE = (11, 26)


def damaged(exc: BaseException) -> bool:
    """Whether SQLite found the file damaged, or no database (its primary code: an extended
    one, ``SQLITE_CORRUPT_INDEX``, is one of them)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and ((code or 0) & 0xFF) in _NOT_A_DATABASE


def _refused(exc: BaseException) -> bool:
    """Whether a look failed on what the file is (foreign, newer, corrupt), so that what SQLite
    made beside it was made by the look alone. A file with no tables yet, or a busy or failing
    read, may be a writer's at work: its ``-wal`` and ``-shm`` appeared while the look opened
    the file, and removing them would take a committed transaction from under the writer (seen:
    readers then found no tables for ever, or "disk I/O error")."""
    if isinstance(exc, LedgerNotReady):
        return False
    if isinstance(exc, LedgerError):
        return True
    return damaged(exc)


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


def file_id(path: Path) -> tuple[int, int] | None:
    """The file at ``path`` (device, inode), or None when there is none: a writer that sees it
    change knows the file it writes was deleted or replaced under it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def __getattr__(name: str) -> object:
    # write_batch's home before ledger_batch: kept through 0.2, as the changelog says.
    if name == "write_batch":
        import warnings

        from turnwatch.tracing import ledger_batch

        warnings.warn(
            "turnwatch.tracing.ledger_file.write_batch is deprecated: use "
            "turnwatch.tracing.ledger_batch.write_batch (or turnwatch.tracing.ledger's)",
            DeprecationWarning,
            stacklevel=2,
        )
        return ledger_batch.write_batch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
