"""The agent CLIs' processes, seen from ``/proc``: which process is a session's CLI, which of its
children are the commands its shell tool ran, each recorded with its start time at detection.

The CLIs' files say a turn was interrupted; they do not say what still runs (Codex does not log
its commands' begin and end, Claude Code fires no hook on an interrupt, Gemini CLI writes a tool
call only once it ended). So the watchdog looks at the processes themselves:

- A session's CLI is the process of that CLI (its command line) whose working directory hashes
  to the session's ``project`` and that started before the session's turn. When two could be,
  the one holding the session file open decides; if none or both do, nothing is attributed.
- Its tool processes are the commands it started inside the turn's window: processes leading
  their own process group, or shells running a command string. Each is recorded as a
  ``process`` call of the turn, with its pid and start time: from then on the scan judges it as
  any recorded tool process (an orphan once the CLI is gone, or the grace window after the turn
  was interrupted), and recovery ends it only while pid and start time still match. The CLI
  itself, the user's shell and anything outside the CLI's tree are never recorded.
- A command started inside a call the CLI declared as background (``run_in_background``,
  ``is_background``) is reported as ``background_process``, never recorded, never signalled.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from turnwatch import names
from turnwatch.runtime.events import Event, EventSink
from turnwatch.runtime.model import FindingKind, ToolClass
from turnwatch.runtime.procfs import Proc, ProcessTable, local_start, start_attrs, wall_shift
from turnwatch.tracing import view
from turnwatch.tracing.batchsql import select_in
from turnwatch.tracing.rows import attrs_of
from turnwatch.watchdog.agentmatch import (
    CLI_NAMES,
    cwd_of,
    holds_open,
    in_project,
    is_cli,
    is_shell_command,
    read_argv,
)
from turnwatch.watchdog.scan import Action, Finding

#: The tool a CLI runs shell commands with: the name a recorded process's call carries.
SHELL_TOOL: Final[Mapping[str, str]] = {
    "codex": "exec_command",
    "claude-code": "Bash",
    "gemini-cli": "run_shell_command",
}
#: A shell is recorded at its second sighting, this much later: by then a CLI that declares
#: background commands has written the call that says so.
CONFIRM_S = 0.3
#: Sessions active this recently are watched.
WATCH_S = 3600.0
#: Slack on the windows compared with process start times (clock ticks, write delays).
SLACK_S = 1.0


@dataclass
class Watched:
    """A CLI session the watchdog looks for processes of."""

    session: str
    source: str
    project: str
    log: str | None
    turn: str | None
    turn_started: float | None
    processing: bool
    settled_ts: float | None
    cli: tuple[int, float] | None


class Attributor:
    """Finds the CLIs' processes and records their tool processes into ``sink``."""

    def __init__(self, sink: EventSink, *, say: Callable[[str], None] = lambda _m: None) -> None:
        self.sink = sink
        self.say = say
        self._argv: dict[tuple[int, float], list[str]] = {}
        self._cwd: dict[tuple[int, float], str | None] = {}
        self._meta: dict[str, tuple[str, str, str | None] | None] = {}
        #: Recorded tool processes still open: (pid, start) → (session, turn, call, tool).
        self._mine: dict[tuple[int, float], tuple[str, str, str, str]] = {}
        self._seen: set[tuple[int, float]] = set()  # recorded (this run or the ledger), alive
        self._pending: dict[tuple[int, float], tuple[Watched, float]] = {}
        self.background: dict[tuple[int, float], Finding] = {}
        self._noted: set[str] = set()
        self._loaded = False
        self._clis: dict[str, list[Proc]] | None = None
        #: Added to a start time the process table gives, to compare it with a CLI's log: 0.0
        #: unless the wall clock stepped since this process read the boot time (each pass).
        self._shift = 0.0

    # --- one pass ---

    def step(self, conn: Any, table: ProcessTable | None = None, now: float | None = None) -> int:
        """Look once; return how many events were recorded."""
        now = time.time() if now is None else now
        watched = self._watched(conn, now)
        if not self._loaded:
            self._load(conn, watched)
        if not (
            any(w.processing for w in watched) or self._mine or self._pending or self.background
        ):
            return 0  # no turn running, nothing recorded alive: /proc is not read at all
        table = table or ProcessTable.scan()
        self._shift = wall_shift()
        n = 0
        self._clis = None  # each CLI's processes, listed once per pass when first needed
        for w in watched:
            if w.cli is None or not table.alive(*w.cli):
                n += self._attribute(w, table)
            if w.cli is not None and table.alive(*w.cli):
                self._look(w, table, now)
        n += self._confirm(conn, table, now)
        n += self._ended(table)
        self.background = {k: f for k, f in self.background.items() if table.alive(*k)}
        self._forget(table)
        return n

    def findings(self) -> list[Finding]:
        """Background processes alive at the last pass: reported, never signalled."""
        return list(self.background.values())

    # --- the sessions ---

    def _watched(self, conn: Any, now: float) -> list[Watched]:
        out = []
        listed: set[str] = set()
        for r in conn.execute(
            "SELECT session, turn, turn_started, processing, settled_ts, runtime_pid, "
            "runtime_create_time, runtime_start_ticks, runtime_boot_id FROM sessions "
            "WHERE processing = 1 OR last_ts > ?",
            (now - WATCH_S,),
        ):
            listed.add(r["session"])
            meta = self._session_meta(conn, r["session"])
            if meta is None:
                continue
            source, project, log = meta
            pid, ct = r["runtime_pid"], view.runtime_start(r)
            out.append(
                Watched(
                    r["session"],
                    source,
                    project,
                    log,
                    r["turn"],
                    r["turn_started"],
                    bool(r["processing"]),
                    r["settled_ts"],
                    (pid, ct) if pid is not None and ct is not None else None,
                )
            )
        # What is kept of sessions is of those watched (a watchdog runs for months).
        for gone in self._meta.keys() - listed:
            del self._meta[gone]
        self._noted &= listed
        return out

    def _session_meta(self, conn: Any, session: str) -> tuple[str, str, str | None] | None:
        """(source, project, log) from the adapter's ``runtime.started``; None: not a CLI's."""
        if session in self._meta:
            return self._meta[session]
        found = None
        for (raw,) in conn.execute(
            "SELECT attrs_json FROM events WHERE session = ? AND kind = ? ORDER BY seq",
            (session, names.RUNTIME_STARTED),
        ):
            a = attrs_of(raw) or {}  # a damaged row's attributes are none
            if a.get(names.K_SOURCE) in CLI_NAMES and isinstance(a.get(names.K_PROJECT), str):
                found = (a[names.K_SOURCE], a[names.K_PROJECT], a.get(names.K_LOG))
        self._meta[session] = found
        return found

    def _load(self, conn: Any, watched: Iterable[Watched]) -> None:
        """What an earlier run recorded: never recorded twice, and their ends still seen."""
        self._loaded = True
        ids = [w.session for w in watched]
        for r in select_in(
            conn,
            "SELECT session, turn, call, tool, pid, create_time, start_ticks, boot_id, ended_ts "
            "FROM calls WHERE pid IS NOT NULL AND session IN ({marks})",
            ids,
        ):
            # On this process's clock, as the table's: an earlier watchdog's record is found
            # again after a clock step; one of an earlier boot (None) matches no process now.
            start = local_start(r["create_time"], r["start_ticks"], r["boot_id"])
            key = (r["pid"], -1.0 if start is None else start)
            self._seen.add(key)
            if r["ended_ts"] is None:
                self._mine[key] = (r["session"], r["turn"], r["call"], r["tool"])

    # --- the CLI ---

    def _attribute(self, w: Watched, table: ProcessTable) -> int:
        if not w.processing:
            return 0  # a settled turn's CLI is looked for only while it has work
        before = (w.turn_started or time.time()) + SLACK_S
        found = [
            p
            for p in self._cli_procs(table).get(w.source, ())
            if p.create_time + self._shift <= before
            and (w.cli is None or p.create_time > w.cli[1])  # a new CLI of the session
            and (cwd := self._dir(p)) is not None
            and in_project(w.project, cwd)
        ]
        # A wrapper and the process it runs (Codex's node launcher and its binary): the inner.
        pids = {p.pid for p in found}
        found = [p for p in found if not any(d.pid in pids for d in table.descendants(p.pid))]
        if len(found) > 1 and w.log is not None:
            holding = [p for p in found if holds_open(p.pid, w.log)]
            found = holding or found
        if len(found) != 1:
            if found and w.session not in self._noted:
                self._noted.add(w.session)
                pids_s = ", ".join(str(p.pid) for p in found)
                self.say(
                    f"session {w.session}: {len(found)} processes could be its CLI "
                    f"(pids {pids_s}); none is attributed"
                )
            return 0
        cli = found[0]
        w.cli = (cli.pid, cli.create_time)
        self._emit(
            Event(
                names.RUNTIME_STARTED,
                w.session,
                time.time(),
                attrs={
                    names.K_SOURCE: w.source,
                    names.K_PID: cli.pid,
                    names.K_CREATE_TIME: cli.create_time,
                    **start_attrs(cli),
                },
            )
        )
        return 1

    # --- its tool processes ---

    def _look(self, w: Watched, table: ProcessTable, now: float) -> None:
        """Commands the CLI started in the turn's window: seen once, recorded when confirmed.

        A command is a process the CLI started that leads its own process group (the shell
        tools run each command as one, so that they can end its whole tree) or a shell running
        a command string; the topmost in each branch only, since what runs below it is its
        group or its tree. The CLI's own helpers (MCP servers, language servers) stay in the
        CLI's group and were started before the turn: never recorded.
        """
        assert w.cli is not None
        if w.turn is None or w.turn_started is None:
            return
        end = (w.settled_ts if not w.processing and w.settled_ts else now) + SLACK_S
        covered: set[int] = set()
        for p in table.descendants(w.cli[0]):  # parents before their children
            if p.ppid in covered:
                covered.add(p.pid)
                continue
            if not (p.pgrp == p.pid or is_shell_command(self._args(p))):
                continue
            covered.add(p.pid)
            key = (p.pid, p.create_time)
            if key in self._seen or key in self._pending or key in self.background:
                continue
            if w.turn_started - SLACK_S <= p.create_time + self._shift <= end:
                self._pending[key] = (w, now)

    def _confirm(self, conn: Any, table: ProcessTable, now: float) -> int:
        n = 0
        for key, (w, seen_at) in list(self._pending.items()):
            if not table.alive(*key):
                del self._pending[key]  # came and went: nothing left behind
                continue
            if now - seen_at < CONFIRM_S:
                continue
            del self._pending[key]
            assert w.turn is not None
            started = key[1] + self._shift  # on the log's clock (and the reader's "ago")
            bg = _background_call(conn, w.session, w.turn, started)
            if bg is not None:
                self.background[key] = Finding(
                    FindingKind.BACKGROUND_PROCESS,
                    w.session,
                    w.turn,
                    call=bg,
                    pid=key[0],
                    create_time=key[1],
                    since=started,
                    detail=f"pid {key[0]} runs in the background by design ({bg}); never signalled",
                    action=Action.REPORT,
                )
                continue
            n += self._record(w, key, table.get(key[0]))
        return n

    def _record(self, w: Watched, key: tuple[int, float], seen: Proc | None) -> int:
        pid, ct = key
        assert w.turn is not None
        call, tool = f"{w.turn}.pid{pid}", SHELL_TOOL[w.source]
        self._seen.add(key)
        self._mine[key] = (w.session, w.turn, call, tool)
        cls = {names.K_CLASS: ToolClass.PROCESS.value}
        at = time.time()
        self._emit(Event(names.TOOL_REQUESTED, w.session, at, None, w.turn, call, tool, cls))
        started = {
            **cls,
            names.K_PID: pid,
            names.K_CREATE_TIME: ct,
            **start_attrs(seen),
            names.K_CONTAINMENT: "process_group",
        }
        self._emit(Event(names.TOOL_STARTED, w.session, at, None, w.turn, call, tool, started))
        return 2

    def _ended(self, table: ProcessTable) -> int:
        """A recorded process that exited: its call is over."""
        n = 0
        for key, (session, turn, call, tool) in list(self._mine.items()):
            if table.alive(*key):
                continue
            del self._mine[key]
            self._emit(Event(names.TOOL_FINISHED, session, time.time(), None, turn, call, tool))
            n += 1
        return n

    # --- caches ---

    def _cli_procs(self, table: ProcessTable) -> dict[str, list[Proc]]:
        """This user's processes of each CLI: one look at every command line per pass (and
        each command line read once in its process's life)."""
        if self._clis is None:
            uid = os.getuid()
            self._clis = {}
            for p in table.procs.values():
                if p.uid != uid or p.zombie:
                    continue
                argv = self._args(p)
                for source in CLI_NAMES:
                    if is_cli(source, argv):
                        self._clis.setdefault(source, []).append(p)
        return self._clis

    def _args(self, p: Proc) -> list[str]:
        key = (p.pid, p.create_time)
        if key not in self._argv:
            self._argv[key] = read_argv(p.pid)
        return self._argv[key]

    def _dir(self, p: Proc) -> str | None:
        key = (p.pid, p.create_time)
        if key not in self._cwd:
            self._cwd[key] = cwd_of(p.pid)
        return self._cwd[key]

    def _forget(self, table: ProcessTable) -> None:
        """Drop what is cached of processes gone (memory stays bounded on a busy host)."""
        for cache in (self._argv, self._cwd):
            for key in [k for k in cache if not table.alive(*k)]:
                del cache[key]
        # A process gone is never listed again (its pid and start time are its own): what
        # recorded it need not be kept.
        self._seen = {k for k in self._seen if table.alive(*k)}

    def _emit(self, ev: Event) -> None:
        self.sink(ev)


def _background_call(conn: Any, session: str, turn: str, started: float) -> str | None:
    """The call of ``turn`` declared background whose window holds ``started``, if one does."""
    for r in conn.execute(
        "SELECT e.call, c.requested_ts, c.ended_ts FROM events e JOIN calls c "
        "ON c.session = e.session AND c.call = e.call "
        "WHERE e.session = ? AND e.turn = ? AND e.kind = ? "
        "AND CASE WHEN json_valid(e.attrs_json) THEN json_extract(e.attrs_json, '$.background') "
        "END = 1",
        (session, turn, names.TOOL_REQUESTED),
    ):
        begin = r["requested_ts"] or 0.0
        end = r["ended_ts"] or time.time()
        if begin - SLACK_S <= started <= end + SLACK_S:
            return str(r["call"])
    return None
