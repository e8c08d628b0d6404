"""Recovery: the same abort walk, from wherever the watchdog stands.

In-process it calls the runtime's ``abort()``; from another process, the runtime's control
endpoint; where the runtime is gone, it applies the policy handlers itself: terminate process
tools (grace, then SIGKILL), discard read-only calls, never touch mutating or extension calls.
Every step is an event, written before the next, so a watchdog killed mid-recovery resumes
without doing anything twice.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from turnwatch import names
from turnwatch.runtime.events import EventSink, now_event
from turnwatch.runtime.runtime import Runtime
from turnwatch.tracing import codec, view
from turnwatch.watchdog import control_client
from turnwatch.watchdog.procs import ProcessTable
from turnwatch.watchdog.scan import Finding
from turnwatch.watchdog.signals import Guard, Target, members

POLL_S = 0.02
HANDLERS = "run the policy handlers (the runtime is gone)"


@dataclass
class Action:
    """What recovery did (or, in a dry run, would do) about one finding."""

    finding: Finding
    action: str
    result: str  # ok, failed, refused, skipped, dry_run, report_only
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            **self.finding.to_json(),
            "action": self.action,
            "result": self.result,
            "detail": self.detail,
        }


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
        self.sink(now_event(kind, f.session, turn=f.turn, call=f.call, tool=f.tool, attrs=attrs))
        self.flush()

    async def recover(self, f: Finding) -> Action:
        if f.kind in (names.F_PINNED_SESSION, names.F_ABORT_RPC_STUCK):
            return await self._walk(f)
        if f.kind in (names.F_ABORTED_WITH_LIVE_PROCESS, names.F_ORPHAN_TOOL_PROCESS):
            if f.policy != "grace":  # a mutating or extension call: awaited, never abandoned
                return Action(f, "report", "report_only", "never abandoned, never signalled")
            return await self._terminate(f)
        return Action(f, "report", "report_only", "never abandoned, never signalled")

    # --- the abort walk ---

    async def _walk(self, f: Finding) -> Action:
        conn = self.conn_factory()
        try:
            rows = view.sessions(conn, only=f.session)
        finally:
            conn.close()
        if not rows:
            return Action(f, "abort walk", "skipped", "session no longer in the ledger")
        row = rows[0]
        table = ProcessTable.scan({p for p in [row.runtime_pid] if p})
        runtime_alive = table.alive(row.runtime_pid, row.runtime_create_time)
        in_process = self.runtime is not None and f.session in self.runtime.sessions
        if in_process:
            how = "call abort() in process"
        elif runtime_alive and row.control:
            how = f"call agent.abort via {row.control}"
        elif not runtime_alive and row.runtime_pid is not None:
            how = HANDLERS
        else:
            return Action(
                f,
                "abort walk",
                "failed",
                f"runtime pid {row.runtime_pid} is alive but has no control endpoint",
            )
        self.say(f"{f.session}: {how}")
        if self.dry_run:
            return Action(f, how, "dry_run")
        try:
            if how == HANDLERS:
                return await self._settle_for_dead_runtime(f, row)
            if in_process:
                assert self.runtime is not None
                receipt = (await self.runtime.abort(f.session, source="watchdog")).value
            else:
                assert row.control is not None
                receipt = await asyncio.to_thread(control_client.abort, row.control, f.session)
        except (control_client.ControlError, OSError) as exc:
            self.record(names.WATCHDOG_RECOVERED, f, result="failed", action=how, error=str(exc))
            return Action(f, how, "failed", str(exc))
        self.record(names.WATCHDOG_RECOVERED, f, result="ok", action=how, receipt=receipt)
        return Action(f, how, "ok", f"receipt {receipt}")

    async def _settle_for_dead_runtime(self, f: Finding, row: view.SessionView) -> Action:
        how = HANDLERS
        held: list[str] = []
        for c in row.calls:
            if not c.open:
                continue
            cf = Finding(
                f.kind, f.session, c.turn, c.call, c.tool, c.pid, c.create_time, policy=c.policy
            )
            if c.policy == "grace" and c.pid is not None and c.create_time is not None:
                await self._terminate(cf)
                self.record(names.TOOL_FINISHED, cf, outcome="aborted", settled_by="watchdog")
            elif c.policy == "race":
                self.record(
                    names.TOOL_RESULT_DISCARDED, cf, outcome="discarded", settled_by="watchdog"
                )
            else:
                table = ProcessTable.scan({c.pid} if c.pid else set())
                if table.alive(c.pid, c.create_time):
                    held.append(f"{c.tool} {c.call} (pid {c.pid}) still runs")
                else:  # it ran inside the runtime, which is dead: it is not running any more
                    self.record(
                        names.TOOL_FINISHED, cf, outcome="lost_with_runtime", settled_by="watchdog"
                    )
        if held:
            self.record(
                names.WATCHDOG_RECOVERED, f, result="failed", action=how, error="; ".join(held)
            )
            return Action(f, how, "failed", "not settled: " + "; ".join(held))
        for kind, attrs in (
            (names.TURN_SETTLED, {"outcome": "aborted", "settled_by": "watchdog"}),
            (names.ABORT_RPC_RETURNED, {"receipt": "watchdog"}),
            (names.PROCESSING_CLEARED, {"by": "watchdog"}),
        ):
            self.sink(now_event(kind, f.session, turn=f.turn, attrs=attrs))
        self.record(names.WATCHDOG_RECOVERED, f, result="ok", action=how)
        return Action(f, how, "ok", "turn recorded settled by the watchdog")

    # --- process termination ---

    def _journal(self, f: Finding) -> float | None:
        """The SIGKILL deadline of a termination this (or a killed) watchdog already began."""
        conn = self.conn_factory()
        try:
            for r in conn.execute(
                "SELECT attrs_json FROM events WHERE kind = ? AND session = ? AND call IS ? "
                "ORDER BY seq DESC",
                (names.WATCHDOG_RECOVERED, f.session, f.call),
            ):
                attrs = codec.loads_stored(r[0])
                if attrs.get("step") == "sigterm" and attrs.get("pid") == f.pid:
                    return float(attrs["kill_at"])
        finally:
            conn.close()
        return None

    async def _terminate(self, f: Finding) -> Action:
        assert f.pid is not None
        assert f.create_time is not None
        leader = Target(f.pid, f.create_time)
        marker = f"{f.session}/{f.call}" if f.call else None
        table = ProcessTable.scan()
        targets = members(leader, marker, table)
        how = f"terminate pid {f.pid} and {max(len(targets) - 1, 0)} more"
        if not targets:
            return Action(f, how, "skipped", "already gone")
        # Judged on this scan; each signal is judged again through its own pidfd when sent.
        refused = [t.pid for t in targets if self.guard.refuse(t, table.get(t.pid))]
        if leader.pid in refused:
            if not self.dry_run:  # counted (recoveries{result="refused"}) and reported
                self.record(
                    names.WATCHDOG_RECOVERED,
                    f,
                    result="refused",
                    action=how,
                    pid=f.pid,
                    refused=refused,
                )
            return Action(f, how, "refused", f"pid {f.pid} fails the identity checks")
        targets = [t for t in targets if t.pid not in refused]
        if self.dry_run:
            return Action(f, how, "dry_run", f"SIGTERM, SIGKILL after {self.grace_s:g} s")
        kill_at = self._journal(f)
        if kill_at is None:  # not begun before: SIGTERM now, and say so first
            kill_at = time.time() + self.grace_s
            self.record(
                names.WATCHDOG_RECOVERED,
                f,
                result="in_progress",
                step="sigterm",
                pid=f.pid,
                create_time=f.create_time,
                kill_at=kill_at,
            )
            for t in targets:
                self.guard.send(t, signal.SIGTERM)
        alive = await self._wait_gone(targets, kill_at)
        for t in alive:
            self.guard.send(t, signal.SIGKILL)
        alive = await self._wait_gone(alive, time.time() + 2.0)
        for t in targets:
            if t not in alive:
                self.record(
                    names.PROCESS_REAPED,
                    f,
                    pid=t.pid,
                    create_time=t.create_time,
                    signal="SIGKILL" if time.time() >= kill_at else "SIGTERM",
                )
        result = "ok" if not alive else "failed"
        self.record(
            names.WATCHDOG_RECOVERED,
            f,
            result=result,
            action=how,
            survivors=[t.pid for t in alive],
            refused=refused,
        )
        return Action(f, how, result, f"{len(targets) - len(alive)} gone, {len(alive)} left")

    async def _wait_gone(self, targets: list[Target], deadline: float) -> list[Target]:
        alive = targets
        while alive:
            table = ProcessTable.scan({t.pid for t in alive})
            alive = [t for t in alive if table.alive(t.pid, t.create_time)]
            if not alive or time.time() >= deadline:
                break
            await asyncio.sleep(POLL_S)  # not our children: polling is the only way to see them go
        return alive
