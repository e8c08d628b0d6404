"""Recovery: the same abort walk, from wherever the watchdog stands.

In-process it calls the runtime's ``abort()``; from another process, the runtime's control
endpoint; where the runtime is gone, it applies the policy handlers itself: terminate process
tools (grace, then SIGKILL), discard read-only calls, never touch mutating or extension calls.
Every step is an event, written before the next, so a watchdog killed mid-recovery resumes
without doing anything twice.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from turnwatch import names
from turnwatch.runtime import terminate
from turnwatch.runtime.cgroup import CallCgroup, cgroup_ino
from turnwatch.runtime.events import EventSink, wall_event
from turnwatch.runtime.model import (
    FindingKind,
    Outcome,
    Policy,
    RecoveryResult,
    StopSource,
    TurnOutcome,
)
from turnwatch.runtime.procfs import ProcessTable
from turnwatch.tracing import view
from turnwatch.tracing.rows import attrs_of
from turnwatch.watchdog import control_client
from turnwatch.watchdog.scan import Action, Finding
from turnwatch.watchdog.signals import Guard, Target, candidates, members

if TYPE_CHECKING:
    from turnwatch.runtime.runtime import Runtime

#: How long after SIGKILL (or cgroup.kill) recovery waits to see every target gone.
KILL_WAIT_S = 2.0


@dataclass(frozen=True)
class How:
    """One way of acting on a finding: its kind, and what exactly, in words."""

    action: Action
    words: str

    def __call__(self, f: Finding, result: RecoveryResult, detail: str = "") -> Recovery:
        """The recovery it came to."""
        return Recovery(f, self.action, result, detail, self.words)


HANDLERS = How(Action.ABORT_WALK, "run the policy handlers (the runtime is gone)")


@dataclass
class Recovery:
    """What recovery did (or, in a dry run, would do) about one finding."""

    finding: Finding
    action: Action  # what kind of thing was done (the closed set)
    result: RecoveryResult
    detail: str = ""
    #: What exactly, in words ("cgroup.kill /sys/fs/cgroup/…", "call abort() in process").
    words: str = ""

    @property
    def said(self) -> str:
        """What was done, as ``recover`` and the watchdog's report say it."""
        return self.words or self.action.value

    def to_json(self) -> dict[str, Any]:
        return {
            **self.finding.to_json(),
            "action": self.said,
            "result": self.result.value,
            "detail": self.detail,
        }


R = RecoveryResult
_NEVER_SIGNALLED = "never abandoned, never signalled"


class Recoverer:
    """Applies recovery actions; ``flush`` makes each recorded step durable before the next."""

    def __init__(
        self,
        conn_factory: Callable[[], sqlite3.Connection],
        sink: EventSink,
        flush: Callable[[], object],
        *,
        grace_s: float,
        runtime: Runtime | None = None,
        dry_run: bool = False,
        guard: Guard | None = None,
        say: Callable[[str], None] = lambda _m: None,
    ) -> None:
        self.conn_factory = conn_factory
        self.sink = sink
        self.flush = flush
        self.grace_s = grace_s
        self.runtime = runtime
        self.dry_run = dry_run
        self.guard = guard or Guard()
        self.say = say

    def record(self, kind: str, f: Finding, **attrs: Any) -> None:
        self.sink(wall_event(kind, f.session, turn=f.turn, call=f.call, tool=f.tool, attrs=attrs))
        self.flush()

    async def recover(self, f: Finding) -> Recovery:
        if f.kind in (FindingKind.PINNED_SESSION, FindingKind.ABORT_RPC_STUCK):
            return await self._walk(f)
        if f.kind in (FindingKind.ABORTED_WITH_LIVE_PROCESS, FindingKind.ORPHAN_TOOL_PROCESS):
            # A mutating or extension call: awaited, never abandoned, never signalled.
            if f.policy != Policy.GRACE.value:
                return Recovery(f, Action.REPORT_AWAITED, R.REPORT_ONLY, _NEVER_SIGNALLED)
            return await self._terminate(f)
        return Recovery(f, f.action, R.REPORT_ONLY, "reported, not acted on")

    # --- the abort walk ---

    async def _walk(self, f: Finding) -> Recovery:
        if self.runtime is not None and f.session in self.runtime.sessions:
            return await self._walk_in_process(f)
        conn = self.conn_factory()
        try:
            rows = view.sessions(conn, only=f.session)
        finally:
            conn.close()
        if not rows:
            return Recovery(f, Action.ABORT_WALK, R.SKIPPED, "session no longer in the ledger")
        row = rows[0]
        table = ProcessTable.scan({p for p in [row.runtime_pid] if p})
        runtime_alive = table.alive(row.runtime_pid, row.runtime_create_time)
        if runtime_alive and row.control:
            how = How(Action.ABORT_WALK, f"call agent.abort via {row.control}")
        elif not runtime_alive and row.runtime_pid is not None:
            how = HANDLERS
        else:
            why = f"runtime pid {row.runtime_pid} is alive but has no control endpoint"
            if not self.dry_run:  # counted: the recoveries-failing alert must be able to fire
                self.record(
                    names.WATCHDOG_RECOVERED,
                    f,
                    result=R.FAILED,
                    action=Action.ABORT_WALK,
                    error=why,
                )
            return Recovery(f, Action.ABORT_WALK, R.FAILED, why)
        self.say(f"{f.session}: {how.words}")
        if self.dry_run:
            return how(f, R.DRY_RUN)
        try:
            if how == HANDLERS:
                return await self._settle_for_dead_runtime(f, row)
            assert row.control is not None
            import asyncio  # here: the watchdog's look imports this module and runs no loop

            receipt = await asyncio.to_thread(control_client.abort, row.control, f.session)
        except (control_client.ControlError, OSError) as exc:
            self.record(
                names.WATCHDOG_RECOVERED, f, result=R.FAILED, action=how.words, error=str(exc)
            )
            return how(f, R.FAILED, str(exc))
        self.record(names.WATCHDOG_RECOVERED, f, result=R.OK, action=how.words, receipt=receipt)
        return how(f, R.OK, f"receipt {receipt}")

    async def _walk_in_process(self, f: Finding) -> Recovery:
        """The session is the runtime's beside us: its own ``abort()``, the ledger unread (it
        may be the part that is failing)."""
        assert self.runtime is not None
        how = How(Action.ABORT_WALK, "call abort() in process")
        self.say(f"{f.session}: {how.words}")
        if self.dry_run:
            return how(f, R.DRY_RUN)
        receipt = (await self.runtime.abort(f.session, source="watchdog")).value
        self.record(names.WATCHDOG_RECOVERED, f, result=R.OK, action=how.words, receipt=receipt)
        return how(f, R.OK, f"receipt {receipt}")

    async def _settle_for_dead_runtime(self, f: Finding, row: view.SessionView) -> Recovery:
        how = HANDLERS
        held: list[str] = []
        for c in row.calls:
            if not c.open:
                continue
            cf = Finding.about(c, f.kind, f.session)
            if c.policy == Policy.GRACE.value and (
                c.cgroup is not None or (c.pid is not None and c.create_time is not None)
            ):
                await self._terminate(cf)
                self.record(names.TOOL_FINISHED, cf, outcome=Outcome.ABORTED, settled_by="watchdog")
            elif c.policy == Policy.RACE.value:
                self.record(
                    names.TOOL_RESULT_DISCARDED,
                    cf,
                    outcome=Outcome.DISCARDED,
                    settled_by="watchdog",
                )
            else:
                table = ProcessTable.scan({c.pid} if c.pid else set())
                if table.alive(c.pid, c.create_time):
                    held.append(f"{c.tool} {c.call} (pid {c.pid}) still runs")
                else:  # it ran inside the runtime, which is dead: it is not running any more
                    self.record(
                        names.TOOL_FINISHED,
                        cf,
                        outcome=Outcome.LOST_WITH_RUNTIME,
                        settled_by="watchdog",
                    )
        if held:
            self.record(
                names.WATCHDOG_RECOVERED,
                f,
                result=R.FAILED,
                action=how.words,
                error="; ".join(held),
            )
            return how(f, R.FAILED, "not settled: " + "; ".join(held))
        for kind, attrs in (
            (
                names.TURN_SETTLED,
                {names.K_OUTCOME: TurnOutcome.ABORTED, names.K_SETTLED_BY: "watchdog"},
            ),
            (names.ABORT_RPC_RETURNED, {names.K_SETTLED_BY: "watchdog"}),
            (names.PROCESSING_CLEARED, {names.K_SETTLED_BY: "watchdog"}),
        ):
            self.sink(wall_event(kind, f.session, turn=f.turn, attrs=attrs))
        self.record(names.WATCHDOG_RECOVERED, f, result=R.OK, action=how.words)
        return how(f, R.OK, "turn recorded settled by the watchdog")

    # --- process termination ---

    def _journal(self, f: Finding) -> float | None:
        """The SIGKILL deadline of a termination already begun: by this (or a killed) watchdog,
        or by the call's runtime, whose ``tools.abort.sent`` of a grace call starts the call's
        window (its SIGTERM went to the call's processes; what a finished call left running
        it never signalled). The watchdog goes on with that window: no second SIGTERM.

        The window is at most as long as recorded (``kill_at`` less the record's own time): a
        wall clock stepped back since (or a record made on a clock running fast) would stretch
        it by the step, an hour for an hour, while the call's processes outlive their grace
        and the watchdog, awaiting them, scans nothing else."""
        conn = self.conn_factory()
        try:
            for ts, raw in conn.execute(
                "SELECT ts_unix, attrs_json FROM events WHERE kind = ? AND session = ? "
                "AND call IS ? ORDER BY seq DESC",
                (names.TOOLS_ABORT_SENT, f.session, f.call),
            ):
                attrs = attrs_of(raw)
                if attrs is None:  # a damaged row: no window to read in it
                    continue
                kill_at = attrs.get(names.K_KILL_AT)
                if not isinstance(kill_at, (int, float)):
                    continue
                step = attrs.get(names.K_STEP)
                if (step == "sigterm" and attrs.get(names.K_PID) == f.pid) or (
                    step is None and not f.lingering  # the runtime's own stop of the call
                ):
                    return min(float(kill_at), time.time() + max(float(kill_at) - float(ts), 0.0))
        finally:
            conn.close()
        return None

    async def _terminate(self, f: Finding) -> Recovery:
        if f.cgroup is not None:
            return await self._kill_cgroup(f, f.cgroup)
        table = ProcessTable.scan()
        if f.lingering:  # what a finished call left running, recorded pid by pid
            targets = [Target(p, ct) for p, ct in f.lingering if table.alive(p, ct)]
            how = How(
                Action.TERMINATE, f"terminate {len(targets)} process(es) {f.tool} left running"
            )
            first = targets[0].pid if targets else None
        else:
            assert f.pid is not None
            assert f.create_time is not None
            targets = members(Target(f.pid, f.create_time), table)
            how = How(
                Action.TERMINATE, f"terminate pid {f.pid} and {max(len(targets) - 1, 0)} more"
            )
            first = f.pid
        # A copied marker proves nothing: such processes are named, never signalled.
        marked = candidates(f"{f.session}/{f.call}", table, targets) if f.call else []
        note = f"; {len(marked)} marked process(es) outside it not signalled" if marked else ""
        if not targets:
            return how(f, R.SKIPPED, "already gone" + note)
        # Judged on this scan; each signal is judged again through its own pidfd when sent.
        refused = [t.pid for t in targets if self.guard.refuse(t, table.get(t.pid))]
        if first in refused:
            if not self.dry_run:  # counted (recoveries{result=R.REFUSED}) and reported
                self.record(
                    names.WATCHDOG_RECOVERED,
                    f,
                    result=R.REFUSED,
                    action=how.words,
                    pid=first,
                    refused_pids=refused,
                )
            return how(f, R.REFUSED, f"pid {first} fails the identity checks")
        targets = [t for t in targets if t.pid not in refused]
        if self.dry_run:
            return how(f, R.DRY_RUN, f"SIGTERM, SIGKILL after {self.grace_s:g} s" + note)
        kill_at = self._journal(f)
        resumed = kill_at is not None
        if kill_at is None:  # not begun before: say so first, then SIGTERM
            kill_at = time.time() + self.grace_s
            # The watchdog's own tools.abort: the journal a restarted watchdog resumes from,
            # not a recovery (a "recovered" event here would count every termination twice).
            self.record(
                names.TOOLS_ABORT_SENT,
                f,
                source=StopSource.WATCHDOG,
                policy=Policy.GRACE,
                step="sigterm",
                pid=f.pid,
                create_time=f.create_time,
                kill_at=kill_at,
            )
        fds = terminate.Pidfds({t.pid: t.create_time for t in targets}, refuse=self.guard.check)
        # Judged again through each pidfd: a pid reused since the scan is refused here.
        refused += [pid for pid, why in fds.refused.items() if why != "gone"]
        try:
            ended = await terminate.terminate(
                fds, max(kill_at - time.time(), 0.0), kill_wait_s=KILL_WAIT_S, term=not resumed
            )
        finally:
            fds.close()
        for t in targets:
            if t.pid in ended.gone:
                self.record(
                    names.PROCESS_REAPED, f, pid=t.pid, create_time=t.create_time, signal=ended.by
                )
        return self._finished(f, how, ended, refused, note)

    async def _kill_cgroup(self, f: Finding, path: str) -> Recovery:
        """End a call's cgroup: membership proves every process in it is the call's."""
        how = How(Action.CGROUP_KILL, f"cgroup.kill {path}")
        cg = CallCgroup.at(path)
        if cg is None:
            return self._refuse(f, how, f"{path} is not a cgroup turnwatch made for a call")
        ino = cgroup_ino(path)  # judged again here: the scan was earlier
        if f.cgroup_id is not None and ino is not None and ino != f.cgroup_id:
            return self._refuse(f, how, f"{path} is another cgroup than the call's, made since")
        if any(cg.holds(pid) for pid in self.guard.protected):
            return self._refuse(f, how, f"{path} holds the watchdog or one of its ancestors")
        found = cg.members()
        if not found:
            return how(f, R.SKIPPED, "already empty")
        if self.dry_run:
            return how(
                f,
                R.DRY_RUN,
                f"SIGTERM {len(found)} member(s), cgroup.kill after {self.grace_s:g} s",
            )
        kill_at = self._journal(f)  # the runtime's window, if it began one before it died
        window = self.grace_s if kill_at is None else max(kill_at - time.time(), 0.0)
        ended = await terminate.terminate(
            terminate.CgroupTarget(cg), window, kill_wait_s=KILL_WAIT_S, term=kill_at is None
        )
        if not ended.alive:
            cg.remove()
        self.record(names.PROCESS_REAPED, f, pids=ended.gone, signal=ended.by, cgroup=path)
        return self._finished(f, how, ended, [], "")

    def _refuse(self, f: Finding, how: How, why: str) -> Recovery:
        if not self.dry_run:
            self.record(names.WATCHDOG_RECOVERED, f, result=R.REFUSED, action=how.words, error=why)
        return how(f, R.REFUSED, why)

    def _finished(
        self, f: Finding, how: How, ended: terminate.Ended, refused: list[int], note: str
    ) -> Recovery:
        result = R.OK if not ended.alive else R.FAILED
        self.record(
            names.WATCHDOG_RECOVERED,
            f,
            result=result,
            action=how.words,
            survivors=ended.alive,
            refused_pids=refused,
        )
        return how(f, result, f"{len(ended.gone)} gone, {len(ended.alive)} left" + note)
