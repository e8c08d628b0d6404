"""Retention of the ledger: the rows of sessions settled before a horizon, deleted.

Never a session that is processing (it can still be pinned), one the caller keeps (an open
finding), or one with a call whose processes may still live: the caller's process table judges
those nobody saw end (``live``), since a foreign runtime's end of a call never says. Deletes
run in small transactions (:data:`BATCH_SESSIONS` sessions each, a few milliseconds), each
re-checking its sessions under the write lock: the runtime's writer thread or ``ingest --follow``
writing the same file waits for one batch at most, and a session that came back to life since
it was chosen is kept. A ledger created with ``auto_vacuum=INCREMENTAL`` (every new one) gives
the pages back to the file system as it goes; an older one is converted by :func:`vacuum`.

An ingested event's dedup key (``ingested``, about 55 bytes) goes with it: kept, the keys were
what grew with history under retention. A file ingested again after its sessions were pruned
records them again, once, as a first ingest would; the next prune takes them again.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from turnwatch.tracing.batchsql import select_in
from turnwatch.tracing.dedup import forget_keys, ingested_keys
from turnwatch.tracing.ledger_file import META_DEDUP_LEGACY, LedgerError, get_meta
from turnwatch.tracing.rows import shadow_summaries
from turnwatch.tracing.view import CallView, call_view

__all__ = ["BATCH_SESSIONS", "LiveCheck", "Pruned", "file_bytes", "holders", "prune", "vacuum"]

#: Sessions deleted per transaction: a few milliseconds of the write lock each.
BATCH_SESSIONS = 100
#: Pages given back per batch (``PRAGMA incremental_vacuum``), so each lock stays short.
VACUUM_PAGES = 2000

_SETTLED = "SELECT session FROM sessions WHERE processing = 0 AND last_ts < ?"
#: Of those, the sessions with a call whose processes nobody saw end.
_MAY_LIVE = (
    f"{_SETTLED} AND EXISTS (SELECT 1 FROM calls c WHERE c.session = sessions.session "
    "AND c.procs_live = 1)"
)
_MAY_LIVE_CALLS = "SELECT * FROM calls WHERE procs_live = 1 AND session IN ({marks})"

#: Whether a process of a call (its ``calls`` row, as :func:`~turnwatch.tracing.view.call_view`
#: reads it) lives now: the watchdog's process table judges it.
LiveCheck = Callable[[CallView], bool]


@dataclass
class Pruned:
    """What a prune deleted (or, dry, would delete)."""

    horizon: float
    dry_run: bool
    sessions: int = 0
    calls: int = 0
    events: int = 0
    #: Dedup keys of ingested events deleted with them.
    keys: int = 0
    #: Sessions old enough but kept, and why (``keep``: the caller's, e.g. an open finding).
    kept: dict[str, int] = field(default_factory=dict)
    freed_bytes: int = 0
    took_s: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "horizon": self.horizon,
            "dry_run": self.dry_run,
            "sessions": self.sessions,
            "calls": self.calls,
            "events": self.events,
            "keys": self.keys,
            "kept": dict(self.kept),
            "freed_bytes": self.freed_bytes,
            "took_s": round(self.took_s, 3),
        }


def prune(
    conn: sqlite3.Connection,
    horizon: float,
    *,
    keep: Collection[str] = (),
    dry_run: bool = False,
    live: LiveCheck | None = None,
) -> Pruned:
    """Delete the rows of every session settled before ``horizon`` (Unix seconds) but those in
    ``keep``; ``conn`` is a writer's connection (:func:`~turnwatch.tracing.ledger_file.connect`,
    autocommit).

    A session with a call whose processes nobody saw end (a foreign runtime's call, whose end
    says nothing of them; one that left some running) is kept while ``live`` says a process of
    it lives; without ``live``, always: a ledger without a process table to look at keeps what
    may live."""
    started = time.perf_counter()
    # What it reads, of the summary rows the writer wrote: a damaged one is never judged
    # settled, nor deleted (its deletes name main.*, the tables under the views).
    shadow_summaries(conn)
    out = Pruned(horizon, dry_run)
    held = _held(conn, _MAY_LIVE, [horizon], live)
    out.kept = _kept(conn, horizon, keep, len(held))
    chosen = [
        r[0] for r in conn.execute(_SETTLED, (horizon,)) if r[0] not in keep and r[0] not in held
    ]
    if dry_run:
        for i in range(0, len(chosen), BATCH_SESSIONS):
            part = chosen[i : i + BATCH_SESSIONS]
            marks = ",".join("?" * len(part))
            out.sessions += len(part)
            out.calls += _count(
                conn, f"SELECT count(*) FROM calls WHERE session IN ({marks})", part
            )
            out.events += _count(
                conn, f"SELECT count(*) FROM events WHERE session IN ({marks})", part
            )
            keys = ingested_keys(conn, part, legacy=_legacy(conn))
            out.keys += forget_keys(conn, [k for s in part for k in keys.get(s, ())], dry_run=True)
        out.took_s = time.perf_counter() - started
        return out
    before = file_bytes(conn)
    for i in range(0, len(chosen), BATCH_SESSIONS):
        _delete(conn, chosen[i : i + BATCH_SESSIONS], horizon, out, live)
    out.freed_bytes = max(before - file_bytes(conn), 0)
    out.took_s = time.perf_counter() - started
    return out


def _eligible(
    conn: sqlite3.Connection, horizon: float, part: list[str], live: LiveCheck | None
) -> list[str]:
    """Those of ``part`` settled before ``horizon`` and not kept for their processes."""
    marks = ",".join("?" * len(part))
    args = [horizon, *part]
    held = _held(conn, f"{_MAY_LIVE} AND session IN ({marks})", args, live)
    settled = conn.execute(f"{_SETTLED} AND session IN ({marks})", args)
    return [r[0] for r in settled if r[0] not in held]


def _held(
    conn: sqlite3.Connection, sql: str, args: Sequence[object], live: LiveCheck | None
) -> set[str]:
    """The sessions ``sql`` selects (of :data:`_MAY_LIVE`) kept for their processes: each,
    without ``live``; with it, those with a call a process of which lives now."""
    may = [r[0] for r in conn.execute(sql, args)]
    if live is None:
        return set(may)
    held: set[str] = set()
    for r in select_in(conn, _MAY_LIVE_CALLS, may):
        if r["session"] not in held and live(call_view(r)):
            held.add(r["session"])
    return held


def _delete(
    conn: sqlite3.Connection, part: list[str], horizon: float, out: Pruned, live: LiveCheck | None
) -> None:
    # Before the lock: reading and hashing the rows is most of a batch's work. A session given
    # an event since keeps that event's key (a few bytes left behind, never a key taken from an
    # event that stays: a key names its session, and only sessions deleted whole lose theirs).
    keys = ingested_keys(conn, part, legacy=_legacy(conn))
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Again under the lock: a session that came back to life since it was chosen stays.
        still = _eligible(conn, horizon, part, live)
        if still:
            marks = ",".join("?" * len(still))
            out.events += conn.execute(
                f"DELETE FROM main.events WHERE session IN ({marks})", still
            ).rowcount
            out.calls += conn.execute(
                f"DELETE FROM main.calls WHERE session IN ({marks})", still
            ).rowcount
            out.sessions += conn.execute(
                f"DELETE FROM main.sessions WHERE session IN ({marks})", still
            ).rowcount
            out.keys += forget_keys(conn, [k for s in still for k in keys.get(s, ())])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    # Its own short transaction, run to its end: execute() would step this PRAGMA once, and
    # each step frees one page.
    conn.executescript(f"PRAGMA incremental_vacuum({VACUUM_PAGES});")


def _kept(
    conn: sqlite3.Connection, horizon: float, keep: Collection[str], held: int
) -> dict[str, int]:
    old = "FROM sessions WHERE last_ts < ?"
    kept = {
        "processing": _count(conn, f"SELECT count(*) {old} AND processing = 1", [horizon]),
        "processes_live": held,
    }
    if keep:
        sql = f"SELECT count(*) {old} AND processing = 0 AND session IN ({{marks}})"
        kept["open_finding"] = sum(
            int(r[0]) for r in select_in(conn, sql, sorted(keep), before=[horizon])
        )
    return {k: v for k, v in kept.items() if v}


def _legacy(conn: sqlite3.Connection) -> bool:
    return get_meta(conn, META_DEDUP_LEGACY) is not None


def _count(conn: sqlite3.Connection, sql: str, args: Sequence[object]) -> int:
    return int(conn.execute(sql, args).fetchone()[0])


def file_bytes(conn: sqlite3.Connection) -> int:
    """The ledger's size as SQLite counts it (pages in use and free)."""
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    (size,) = conn.execute("PRAGMA page_size").fetchone()
    return int(pages) * int(size)


def vacuum(conn: sqlite3.Connection, path: Path) -> float:
    """Convert an existing ledger to ``auto_vacuum=INCREMENTAL`` (a full ``VACUUM``: it rewrites
    the file, needs about its size free beside it, and holds the write lock throughout: writers
    wait, then retry). Returns the seconds it took. Raises :class:`LedgerError` when the file
    system lacks the room."""
    size = file_bytes(conn)
    free = shutil.disk_usage(path.parent).free
    if free < size * 1.1:
        raise LedgerError(
            f"{path}: vacuum needs about {size / 1e6:.0f} MB free beside the file, "
            f"{free / 1e6:.0f} MB is"
        )
    started = time.perf_counter()
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    conn.execute("VACUUM")
    return time.perf_counter() - started


def holders(path: Path) -> list[str]:
    """The processes that have ``path`` open (``pid name``): who holds a locked ledger."""
    import psutil  # here: only a locked ledger asks, and the triage commands start without it

    want = {str(path), f"{path}-wal", f"{path}-shm"}
    out = []
    me = os.getpid()
    for p in psutil.process_iter(["pid", "name"]):
        if p.info["pid"] == me:
            continue
        try:
            if any(f.path in want for f in p.open_files()):
                out.append(f"{p.info['pid']} {p.info['name']}")
        except psutil.Error:
            continue
    return out
