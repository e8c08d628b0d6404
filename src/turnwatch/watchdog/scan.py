"""The scan: what still pins a session after a stop (design §6), from one ledger read and one
``/proc`` pass; each a :class:`~turnwatch.watchdog.findings.Finding`.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from turnwatch.runtime import cgroup
from turnwatch.runtime.model import FindingKind, Policy, SessionStatus
from turnwatch.runtime.procfs import ProcessTable, boot_id
from turnwatch.tracing import view
from turnwatch.tracing.batchsql import select_in
from turnwatch.tracing.view import CallView, SessionView
from turnwatch.watchdog.findings import (
    DEFAULT_CONFIG,
    SLACK_S,
    Action,
    Config,
    Finding,
    ScanResult,
)

__all__ = [
    "DEFAULT_CONFIG",
    "SLACK_S",
    "Action",
    "Config",
    "Finding",
    "ScanResult",
    "alive_of",
    "annotate_findings",
    "annotated",
    "apply_findings",
    "lives",
    "scan",
]


def _about(
    kind: FindingKind,
    session: str,
    c: CallView,
    since: float | None,
    detail: str = "",
    action: Action = Action.REPORT,
) -> Finding:
    """A finding about one recorded call."""
    return Finding.about(c, kind, session, since=since, detail=detail, action=action)


def _age(now: float, ts: float | None) -> float:
    return now - ts if ts is not None else 0.0


def scan(
    conn: sqlite3.Connection,
    *,
    cfg: Config = DEFAULT_CONFIG,
    now: float | None = None,
    table: ProcessTable | None = None,
) -> ScanResult:
    """Every finding the ledger and the live process table show now."""
    started = time.perf_counter()
    now = time.time() if now is None else now
    table = table or ProcessTable.scan()
    out = _recorded_processes(conn, cfg, now, table)
    out += _outliving(conn, cfg, now, table)
    out += _pinned(conn, cfg, now, table)
    out += _overdue(conn, cfg, now)
    out += _after_the_stop(conn)
    return ScanResult(out, table, time.perf_counter() - started)


def _recorded_processes(
    conn: sqlite3.Connection, cfg: Config, now: float, table: ProcessTable
) -> list[Finding]:
    """Recorded pids alive now: orphans of a dead runtime, and processes past their grace."""
    out: list[Finding] = []
    live = sorted(table.procs)
    # Recorded tool processes that may still run: only pids alive now, found via the index.
    candidates = [
        (r["session"], view.call_view(r))
        for r in select_in(
            conn, "SELECT * FROM calls WHERE reaped_ts IS NULL AND pid IN ({marks})", live
        )
    ]
    # Their sessions' runtimes, by primary key: not every session the ledger ever held.
    runtimes: dict[str, tuple[Any, Any, Any, Any]] = {}
    wanted = sorted({session for session, _c in candidates})
    for r in select_in(
        conn,
        "SELECT session, runtime_pid, runtime_create_time, runtime_start_ticks, runtime_boot_id, "
        "turn, stop_ts FROM sessions WHERE session IN ({marks})",
        wanted,
    ):
        runtimes[r["session"]] = (
            r["runtime_pid"],
            view.runtime_start(r),
            r["turn"],
            r["stop_ts"],
        )
    for session, c in candidates:
        if c.cgroup is not None or not table.alive(c.pid, c.create_time):
            continue  # a cgroup call is judged by its cgroup, below
        rpid, rct, turn, stop_ts = runtimes.get(session, (None, None, None, None))
        # A stopped turn's process no runtime sent an abort (an agent CLI's interrupt): left
        # behind, an orphan of its turn once the grace window has passed.
        left = c.abort_ts is None and turn == c.turn and stop_ts is not None
        # Mutating and extension processes are never signalled.
        signalable = c.policy == Policy.GRACE.value
        if rpid is not None and not table.alive(rpid, rct):
            out.append(
                _about(
                    FindingKind.ORPHAN_TOOL_PROCESS,
                    session,
                    c,
                    c.started_ts,
                    f"{c.tool} pid {c.pid} lives; its runtime pid {rpid} is gone",
                    Action.TERMINATE if signalable else Action.REPORT_AWAITED,
                )
            )
        elif signalable and left and _age(now, stop_ts) > cfg.past_grace_s:
            out.append(
                _about(
                    FindingKind.ORPHAN_TOOL_PROCESS,
                    session,
                    c,
                    stop_ts,
                    f"{c.tool} pid {c.pid} still alive "
                    f"{_age(now, stop_ts) - cfg.grace_s:.0f} s after the grace window; "
                    "the interrupt left it behind",
                    Action.TERMINATE,
                )
            )
        elif signalable and c.abort_ts is not None and _age(now, c.abort_ts) > cfg.past_grace_s:
            out.append(
                _about(
                    FindingKind.ABORTED_WITH_LIVE_PROCESS,
                    session,
                    c,
                    c.abort_ts,
                    f"{c.tool} pid {c.pid} still alive "
                    f"{_age(now, c.abort_ts) - cfg.grace_s:.0f} s after the grace "
                    "window",
                    Action.TERMINATE,
                )
            )
    return out


def _pinned(
    conn: sqlite3.Connection, cfg: Config, now: float, table: ProcessTable
) -> list[Finding]:
    """Sessions still "processing" that should not be, and abort RPCs that never returned."""
    out: list[Finding] = []
    for r in conn.execute("SELECT * FROM sessions WHERE processing = 1"):
        state, since = view.judge(r, now, cfg)
        rpid = r["runtime_pid"]
        if rpid is not None and not table.alive(rpid, view.runtime_start(r)):
            state, why = SessionStatus.PINNED, f"its runtime pid {rpid} is gone"
        elif state == SessionStatus.PINNED:
            why = (
                "the turn settled but processing was never cleared"
                if r["settled_ts"]
                else "the abort RPC is still pending"
            )
        else:
            continue
        out.append(
            Finding(
                FindingKind.PINNED_SESSION,
                r["session"],
                r["turn"],
                since=since,
                detail=why,
                action=Action.ABORT_WALK,
            )
        )
        if r["rpc_pending"] and r["settled_ts"] is None:
            out.append(
                Finding(
                    FindingKind.ABORT_RPC_STUCK,
                    r["session"],
                    r["turn"],
                    since=since,
                    detail=f"agent.abort pending {_age(now, since):.0f} s",
                    action=Action.ABORT_WALK,
                )
            )
    return out


def _overdue(conn: sqlite3.Connection, cfg: Config, now: float) -> list[Finding]:
    """Awaited calls (mutating, extension) silent long after the stop: reported, never touched."""
    out: list[Finding] = []
    for r in conn.execute(
        "SELECT * FROM calls WHERE abort_ts IS NOT NULL AND ended_ts IS NULL AND policy = 'await'"
    ):
        c = view.call_view(r)
        quiet = max(c.abort_ts or 0.0, c.last_progress_ts or 0.0)
        if _age(now, quiet) > cfg.overdue_s:
            out.append(
                _about(
                    FindingKind.AWAIT_OVERDUE,
                    r["session"],
                    c,
                    c.abort_ts,
                    f"{c.tool} ({c.tool_class}) silent {_age(now, quiet):.0f} s after "
                    "the stop; awaited, never abandoned",
                    Action.REPORT_AWAITED,
                )
            )
    return out


def _after_the_stop(conn: sqlite3.Connection) -> list[Finding]:
    """Activity after settlement, and permissions granted after the stop."""
    out: list[Finding] = []
    both = (
        "SELECT c.*, s.stop_ts AS s_stop FROM calls c JOIN sessions s "
        "ON c.session = s.session AND c.turn = s.turn WHERE "
    )
    # Each through its partial index: the calls that have either, and no other (an OR of the
    # two would read every call ever recorded).
    for r in conn.execute(
        f"{both} c.late_ts IS NOT NULL UNION ALL "
        f"{both} c.late_grant_ts IS NOT NULL AND c.late_ts IS NULL"
    ):
        c = view.call_view(r)
        if c.late_ts is not None:
            out.append(
                _about(
                    FindingKind.ACTIVITY_AFTER_SETTLE,
                    r["session"],
                    c,
                    c.late_ts,
                    f"{c.tool} reported activity after its turn settled",
                )
            )
        if r["late_grant_ts"] is not None:
            out.append(
                _about(
                    FindingKind.PERMISSION_AFTER_STOP,
                    r["session"],
                    c,
                    c.granted_ts,
                    f"{c.tool} was approved after the stop",
                )
            )
    return out


def _outliving(
    conn: sqlite3.Connection, cfg: Config, now: float, table: ProcessTable
) -> list[Finding]:
    """Calls whose processes outlive the stop: a populated cgroup, or lingering processes."""
    out: list[Finding] = []
    for r in conn.execute(
        "SELECT c.*, s.stop_ts AS s_stop, s.turn AS s_turn, s.runtime_pid AS s_rpid, "
        "s.runtime_create_time AS s_create_time, s.runtime_start_ticks AS s_start_ticks, "
        "s.runtime_boot_id AS s_boot_id FROM calls c JOIN sessions s ON c.session = s.session "
        "WHERE c.procs_live = 1 AND (c.cgroup IS NOT NULL OR c.lingering IS NOT NULL)"
    ):
        c = view.call_view(r)
        if c.policy != Policy.GRACE.value:
            continue  # mutating/extension processes are never signalled (await_overdue says so)
        live = _left_alive(c, table)
        if not live:
            continue
        if c.cgroup is not None:
            what = f"cgroup {c.cgroup} holds {len(live)} process(es)"
        else:
            what = f"{len(live)} process(es) it left running live"
        stopped = c.abort_ts or (r["s_stop"] if r["s_turn"] == c.turn else None)
        action = Action.CGROUP_KILL if c.cgroup is not None else Action.TERMINATE
        if r["s_rpid"] is not None and not table.alive(r["s_rpid"], view.runtime_start(r, "s_")):
            kind, why = FindingKind.ORPHAN_TOOL_PROCESS, f"its runtime pid {r['s_rpid']} is gone"
        elif stopped is not None and _age(now, stopped) > cfg.past_grace_s:
            # The recorded process itself: as in process-group mode; what it left: orphans.
            leader = table.alive(c.pid, c.create_time)
            kind = (
                FindingKind.ABORTED_WITH_LIVE_PROCESS if leader else FindingKind.ORPHAN_TOOL_PROCESS
            )
            why = f"{_age(now, stopped) - cfg.grace_s:.0f} s after the grace window"
        else:
            continue
        since = stopped or c.started_ts
        f = _about(kind, r["session"], c, since, f"{c.tool}: {what}; {why}", action)
        if not table.alive(c.pid, c.create_time):  # name a process that does live
            f = replace(f, pid=live[0][0], create_time=live[0][1])
        out.append(f)
    return out


def _left_alive(c: CallView, table: ProcessTable) -> list[tuple[int, float]]:
    """The call's processes alive now: its cgroup's members, or what it left running."""
    if not c.procs_live:
        return []
    if c.cgroup is not None:
        if not _same_cgroup(c):
            return []
        seen = [table.get(p) for p in cgroup.read_members(Path(c.cgroup))]
        return [(p.pid, p.create_time) for p in seen if p is not None and not p.zombie]
    return [(p, ct) for p, ct in c.lingering if table.alive(p, ct)]


def _same_cgroup(c: CallView) -> bool:
    """Whether the cgroup at the call's recorded path is still the call's (as far as the record
    can tell). The path names the runtime by its pid and the call by its number: a runtime with
    the same pid later (the next boot's, as a service started at boot often is; or this boot's,
    pids wrapped) makes the same path for a call of its own."""
    if isinstance(c.boot_id, str) and c.boot_id != boot_id():
        return False  # made in another boot: that cgroup went with it
    return not isinstance(c.cgroup_id, int) or cgroup.cgroup_ino(c.cgroup or "") == c.cgroup_id


def alive_of(c: CallView, table: ProcessTable) -> list[tuple[int, float]]:
    """Every process of the call alive now: what it left or its cgroup holds, else its own
    recorded process (pid and start time) while nobody saw it reaped."""
    left = _left_alive(c, table)
    if left or c.pid is None or c.create_time is None or c.reaped_ts is not None:
        return left
    return [(c.pid, c.create_time)] if table.alive(c.pid, c.create_time) else []


def lives(c: CallView, *, table: ProcessTable) -> bool:
    """Whether a process of the call lives now (retention keeps its session while one does)."""
    return bool(alive_of(c, table))


def annotate_findings(
    conn: sqlite3.Connection,
    *,
    cfg: Config = DEFAULT_CONFIG,
    now: float | None = None,
    limit: int | None = None,
    processing: bool = False,
) -> list[SessionView]:
    """The sessions view with each session's findings filled in: every session, or (``limit``)
    those processing and the ``limit`` most recent, or only those ``processing``."""
    return annotated(conn, cfg=cfg, now=now, limit=limit, processing=processing)[0]


def annotated(
    conn: sqlite3.Connection,
    *,
    cfg: Config = DEFAULT_CONFIG,
    now: float | None = None,
    limit: int | None = None,
    processing: bool = False,
) -> tuple[list[SessionView], list[Finding]]:
    """:func:`annotate_findings`, and the findings of the one scan it made (a caller that
    also explains a session passes them on, rather than scan again)."""
    now = time.time() if now is None else now
    if processing:
        rows = view.sessions(conn, now=now, th=cfg, processing=True)
    elif limit is not None:
        rows = view.live_and_recent(conn, limit, now=now, th=cfg)
    else:
        rows = view.sessions(conn, now=now, th=cfg)
    result = scan(conn, cfg=cfg, now=now)
    assert result.table is not None
    for r in rows:
        r.live_processes = sum(len(alive_of(c, result.table)) for c in r.calls)
        if r.mode is None:  # an agent CLI's session: its reader says which CLI (by index)
            r.source = view.producer(conn, r.session)
    return apply_findings(rows, result.findings), list(result.findings)


def apply_findings(rows: list[SessionView], findings: Iterable[Finding]) -> list[SessionView]:
    """Each row with its sessions' findings named, and pinned when a finding says so."""
    by = {r.session: r for r in rows}
    for f in findings:
        row = by.get(f.session)
        if row is None:
            continue
        if f.kind not in row.findings:
            row.findings.append(f.kind)
        if f.kind == FindingKind.PINNED_SESSION and row.state != SessionStatus.PINNED:
            row.state, row.since = SessionStatus.PINNED, f.since  # e.g. its runtime is gone
    return rows
