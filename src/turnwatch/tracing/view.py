"""The derived view the CLI and the watchdog read: sessions, their state, calls, a stop timeline."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.runtime.fold import CALL_COLUMNS, CallState, SessionState
from turnwatch.runtime.model import Phase, SessionStatus
from turnwatch.runtime.procfs import local_start
from turnwatch.tracing.batchsql import select_in
from turnwatch.tracing.rows import UnreadableRow, lingering_of, read_events

#: A stop whose ``agent.abort`` is still pending after this long pins the session.
RPC_STUCK_AFTER_S = 15.0
#: "processing" still set this long after the turn settled pins the session.
CLEAR_LAG_S = 2.0


@dataclass(frozen=True)
class Thresholds:
    """When a stop has taken too long; the watchdog's defaults (configurable)."""

    rpc_stuck_s: float = RPC_STUCK_AFTER_S
    clear_lag_s: float = CLEAR_LAG_S


@dataclass
class CallView:
    """One call of a session's live or last turn."""

    call: str
    turn: str | None
    tool: str | None
    tool_class: str | None
    policy: str | None
    started_ts: float | None
    pid: int | None
    #: The process's start on this process's clock (:func:`~turnwatch.runtime.procfs.local_start`
    #: of what was recorded): what a look at ``/proc`` here gives for the same process. None: not
    #: known, or of an earlier boot.
    create_time: float | None
    abort_ts: float | None
    ended_ts: float | None
    outcome: str | None
    last_progress_ts: float | None
    prompt_open: bool
    reaped_ts: float | None
    late_ts: float | None
    granted_ts: float | None = None
    #: ``cgroup`` or ``process_group`` (None: not a process call, or a runtime that did not say).
    containment: str | None = None
    cgroup: str | None = None
    #: Processes the call left running when it finished: ``[(pid, start time), ...]`` (the start
    #: on this process's clock, as ``create_time``).
    lingering: list[tuple[int, float]] = field(default_factory=list)
    #: The call's processes may still live (started, and not known to be gone).
    procs_live: bool = False
    #: The process's start as recorded by the kernel's clock (ticks since boot, the boot's id).
    start_ticks: int | None = None
    boot_id: str | None = None
    #: The cgroup's inode number, as recorded: the cgroup at ``cgroup`` now is the call's only
    #: while it has this one.
    cgroup_id: int | None = None

    @property
    def open(self) -> bool:
        """Not yet resolved by the runtime."""
        return self.ended_ts is None

    @property
    def phase(self) -> str | None:
        """Where the call is while the runtime holds it (None once resolved)."""
        return held_phase(self.started_ts, self.prompt_open) if self.open else None


def held_phase(started_ts: float | None, prompt_open: bool | int) -> str:
    """Where a call the runtime still holds is: ``running`` only once it began; one waiting for
    its user's answer (``awaiting_permission``) or for a slot (``queued``) has no process."""
    if started_ts is not None:
        return Phase.RUNNING.value
    return (Phase.AWAITING_PERMISSION if prompt_open else Phase.QUEUED).value


@dataclass
class SessionView:
    """A session as the ledger shows it."""

    session: str
    state: SessionStatus
    turn: str | None
    since: float | None
    mode: str | None
    runtime_pid: int | None
    #: The runtime's start on this process's clock (:func:`runtime_start`).
    runtime_create_time: float | None
    control: str | None
    processing: bool
    stop_ts: float | None
    settled_ts: float | None
    outcome: str | None
    rpc_pending: bool
    last_ts: float | None
    calls: list[CallView] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    #: Live processes of the current turn's calls: in their cgroups, or left running by a call
    #: that finished. Filled in by the watchdog's look at /proc (``annotate_findings``).
    live_processes: int = 0
    #: Events of the session the ledger lost (``ledger.gap``), and the last lost one's time.
    gap_lost: int = 0
    gap_ts: float | None = None
    #: Who wrote it when no runtime mode says (an agent CLI: ``claude-code``); see :func:`producer`.
    source: str | None = None
    #: The runtime's start as recorded by the kernel's clock (ticks since boot, the boot's id).
    runtime_start_ticks: int | None = None
    runtime_boot_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "state": self.state,
            "turn": self.turn,
            "since": self.since,
            "findings": list(self.findings),
            "live_processes": self.live_processes,
            "mode": self.mode,
            "source": self.source,
            "runtime_pid": self.runtime_pid,
            "stop_ts": self.stop_ts,
            "settled_ts": self.settled_ts,
            "outcome": self.outcome,
            "rpc_pending": self.rpc_pending,
            "gap_lost": self.gap_lost,
            "calls": [
                {
                    "call": c.call,
                    "tool": c.tool,
                    "class": c.tool_class,
                    "policy": c.policy,
                    "pid": c.pid,
                    "containment": c.containment,
                    "cgroup": c.cgroup,
                    "lingering": [pid for pid, _ct in c.lingering],
                    "outcome": c.outcome,
                    "open": c.open,
                    "phase": c.phase,
                }
                for c in self.calls
            ],
        }


def judge(row: Any, now: float, th: Thresholds) -> tuple[SessionStatus, float | None]:
    """The state of a session row, and since when it holds: ``unknown`` while the ledger lost
    events of it after its last known turn began, its stop settled or its spinner cleared (what
    the row says would be what the gap made up)."""
    try:
        gap = row["gap_ts"]
    except IndexError:  # a ledger older than schema 5: nothing was recorded lost
        gap = None
    if gap is not None and not _after(
        gap, row["turn_started"], row["settled_ts"], row["cleared_ts"]
    ):
        return SessionStatus.UNKNOWN, gap
    if not row["processing"]:
        return SessionStatus.IDLE, row["cleared_ts"] or row["last_ts"]
    stop, settled = row["stop_ts"], row["settled_ts"]
    if settled is not None:
        if now - settled > th.clear_lag_s:
            return SessionStatus.PINNED, settled  # settled, yet the spinner never cleared
        return SessionStatus.STOPPING, stop or settled
    if stop is not None:
        if now - stop > th.rpc_stuck_s:
            return SessionStatus.PINNED, stop  # the abort RPC is pending too long
        return SessionStatus.STOPPING, stop
    return SessionStatus.PROCESSING, row["turn_started"]


def _after(gap: float, *times: float | None) -> bool:
    return any(t is not None and t > gap for t in times)


def call_view(r: Any) -> CallView:
    """A ``calls`` row as a :class:`CallView`: every field it shares with the fold's
    :class:`~turnwatch.runtime.fold.CallState` taken by column name (a column added to both
    needs no edit here), the rest derived."""
    columns = r.keys()  # a list (``in`` on the row itself would look at its values)
    get = _picks(columns, _CALL_PICK)
    text = r["lingering"] if "lingering" in columns else None  # schema 1: not recorded
    got = {f: r[i] for f, i in get}
    boot = got.get("boot_id")
    got["create_time"] = local_start(got["create_time"], got.get("start_ticks"), boot)
    return CallView(
        **got,
        prompt_open=bool(r["prompt_open"]),
        lingering=lingering_of(text, boot),
        procs_live=bool(r["procs_live"]) if "procs_live" in columns else False,
    )


def runtime_start(r: Any, prefix: str = "runtime_") -> float | None:
    """A ``sessions`` row's runtime start on this process's clock (:func:`local_start` of the
    columns ``prefix`` + ``create_time``, ``start_ticks`` and ``boot_id``)."""
    try:
        ticks, boot = r[f"{prefix}start_ticks"], r[f"{prefix}boot_id"]
    except IndexError:  # a connection to a ledger older than schema 6 without the readers' view
        ticks = boot = None
    return local_start(r[f"{prefix}create_time"], ticks, boot)


def _shared(view_cls: type[Any], state_cls: type[Any]) -> frozenset[str]:
    return frozenset(f.name for f in fields(view_cls)) & {f.name for f in fields(state_cls)}


#: (field, column) of each state: ``tool_class`` is stored as ``class``.
_CALL_COLS = tuple(zip((f.name for f in fields(CallState)), CALL_COLUMNS, strict=True))
_SESSION_COLS = tuple((f.name, f.name) for f in fields(SessionState))
#: The fields a view copies from its state as they are (the rest it derives).
_CALL_SHARED = _shared(CallView, CallState) - {"prompt_open", "lingering", "procs_live"}
_SESSION_SHARED = _shared(SessionView, SessionState) - {"processing", "rpc_pending"}
#: (field, column) of what each view copies, by name.
_CALL_PICK = tuple((f, c) for f, c in _CALL_COLS if f in _CALL_SHARED)
_SESSION_PICK = tuple((f, c) for f, c in _SESSION_COLS if f in _SESSION_SHARED)
_PICKS: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], tuple[tuple[str, int], ...]] = {}


def _picks(
    columns: Sequence[str], pick: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, int], ...]:
    """Each picked field and its column's index in rows with ``columns`` (worked out once per
    shape of row: a ledger of 10,000 sessions is read a row at a time)."""
    key = (tuple(columns), pick)
    found = _PICKS.get(key)
    if found is None:
        index: dict[str, int] = {}
        for i, c in enumerate(columns):
            index.setdefault(c, i)  # a name twice: the table's own column comes first
        found = _PICKS[key] = tuple((f, index[c]) for f, c in pick if c in index)
    return found


def sessions(
    conn: sqlite3.Connection,
    *,
    now: float | None = None,
    th: Thresholds = Thresholds(),
    with_calls: bool = True,
    only: str | None = None,
    limit: int | None = None,
    processing: bool = False,
) -> list[SessionView]:
    """Sessions, most recent first, with their state and their current turn's calls: every one,
    ``only`` one, the ``limit`` most recent, or those still ``processing`` (what can be pinned).
    Each read goes through an index: its cost is what it returns, not the ledger's history."""
    now = time.time() if now is None else now
    sql = "SELECT * FROM sessions"
    args: tuple[Any, ...] = ()
    if only is not None:
        sql += " WHERE session = ?"
        args = (only,)
    elif processing:
        sql += " WHERE processing = 1"
    sql += " ORDER BY last_ts DESC"
    if limit is not None:
        sql += " LIMIT ?"
        args += (limit,)
    out: list[SessionView] = []
    cursor = conn.execute(sql, args)
    get = _picks([d[0] for d in cursor.description], _SESSION_PICK)
    for r in cursor:
        state, since = judge(r, now, th)
        got = {f: r[i] for f, i in get}
        got["runtime_create_time"] = local_start(
            got.get("runtime_create_time"),
            got.get("runtime_start_ticks"),
            got.get("runtime_boot_id"),
        )
        out.append(
            SessionView(
                **got,
                state=state,
                since=since,
                processing=bool(r["processing"]),
                rpc_pending=bool(r["rpc_pending"]),
            )
        )
    if with_calls and out:
        by = {(s.session, s.turn): s for s in out}
        ids = [s.session for s in out]
        # The order they were made in: the table's rowid (the readers' view has none).
        q = (
            "SELECT c.* FROM calls c JOIN main.calls m ON m.session = c.session "
            "AND m.call = c.call WHERE c.session IN ({marks}) ORDER BY m.rowid"
        )
        for r in select_in(conn, q, ids):  # the primary key, (session, call); in their order
            sv = by.get((r["session"], r["turn"]))
            if sv is not None:
                sv.calls.append(call_view(r))
    return out


def live_and_recent(
    conn: sqlite3.Connection, limit: int, *, now: float | None = None, th: Thresholds = Thresholds()
) -> list[SessionView]:
    """Every session still processing (what can be pinned), and the ``limit`` most recent:
    what a page or a table of a long-lived ledger shows, most recent first."""
    rows = {r.session: r for r in sessions(conn, now=now, th=th, limit=limit)}
    for r in sessions(conn, now=now, th=th, processing=True):
        rows.setdefault(r.session, r)
    return sorted(rows.values(), key=lambda r: r.last_ts or 0.0, reverse=True)


def count(conn: sqlite3.Connection) -> int:
    """How many sessions the ledger holds (``sessions`` says how many it did not show), those
    whose row is damaged too: the table's own count, not the readers' view (a count of every
    row tested, not the b-tree's)."""
    return int(conn.execute("SELECT count(*) FROM main.sessions").fetchone()[0])


def session_ids(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT session FROM sessions ORDER BY last_ts DESC")]


def find_turn(conn: sqlite3.Connection, ident: str) -> tuple[str, str] | None:
    """``(session, turn)`` for a session id (its current turn) or a turn id."""
    row = conn.execute("SELECT session, turn FROM sessions WHERE session = ?", (ident,)).fetchone()
    if row is not None and row["turn"] is not None:
        return row["session"], row["turn"]
    # A session's current turn is in the summary; an older turn only in the events (a scan,
    # rare: explain is usually asked about the stop that pins a session now).
    row = conn.execute("SELECT session, turn FROM sessions WHERE turn = ?", (ident,)).fetchone()
    row = (
        row
        or conn.execute(
            "SELECT session, turn FROM events WHERE turn = ? LIMIT 1", (ident,)
        ).fetchone()
    )
    return (row["session"], row["turn"]) if row else None


def timeline(
    conn: sqlite3.Connection,
    session: str,
    turn: str,
    on_bad: Callable[[UnreadableRow], object] | None = None,
) -> list[Event]:
    """Every event of one turn, in order (the stop's timeline is its tail from the click); a
    row no event can be made of raises, or, given ``on_bad``, is handed to it and left out."""
    return [ev for _seq, ev in read_events(conn, session=session, turn=turn, on_bad=on_bad)]


def producer(conn: sqlite3.Connection, session: str) -> str | None:
    """Who wrote the session's events, as its last ``runtime.started`` says (``attrs.source``:
    an agent CLI, or an integration), or None."""
    row = conn.execute(
        # Attributes that are no JSON (a damaged row) make json_extract raise: CASE asks first.
        "SELECT CASE WHEN json_valid(attrs_json) THEN json_extract(attrs_json, '$.source') END "
        "FROM events "
        "WHERE session = ? AND kind = ? ORDER BY seq DESC LIMIT 1",
        (session, names.RUNTIME_STARTED),
    ).fetchone()
    return row[0] if row and isinstance(row[0], str) else None


def children(conn: sqlite3.Connection, session: str) -> list[str]:
    """The sessions whose runs ``session``'s tools started (nested runs), by id."""
    rows = conn.execute(
        "SELECT session FROM sessions WHERE parent_session = ? ORDER BY session", (session,)
    )
    return [r[0] for r in rows]
