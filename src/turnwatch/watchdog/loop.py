"""The watchdog loop: scan, report each finding once, recover (rate-limited).

Runs as an asyncio task beside a runtime (``Watchdog(..., runtime=rt).run()``) or as its own
program (``turnwatch watch``). asyncio is imported by what awaits: a look (:meth:`Watchdog.look`,
``watch --once --no-recover``) runs no event loop and does without its imports.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from turnwatch import names
from turnwatch.runtime.events import EventSink, wall_event
from turnwatch.runtime.model import FindingKind, RecoveryResult
from turnwatch.runtime.procfs import ProcessTable
from turnwatch.tracing.ledger_file import LedgerError, LedgerNotReady, connect
from turnwatch.tracing.prune import Pruned, prune
from turnwatch.tracing.rows import damaged_summaries
from turnwatch.watchdog.cycle import Cycle as Cycle  # its home before cycle.py
from turnwatch.watchdog.inprocess import merged, runtime_findings
from turnwatch.watchdog.pacing import BACKOFF_MAX_S as BACKOFF_MAX_S  # their home before pacing
from turnwatch.watchdog.pacing import BACKOFF_MIN_S as BACKOFF_MIN_S
from turnwatch.watchdog.pacing import DEFAULT_RATE_PER_MIN, Pacing
from turnwatch.watchdog.recover import Recoverer, Recovery
from turnwatch.watchdog.scan import (
    DEFAULT_CONFIG,
    Action,
    Config,
    Finding,
    ScanResult,
    lives,
    scan,
)
from turnwatch.watchdog.signals import Guard

if TYPE_CHECKING:
    import asyncio

    from turnwatch.runtime.runtime import Runtime
    from turnwatch.watchdog.threads import Threads

DEFAULT_INTERVAL_S = 5.0
#: With ``retain_s``, how often the ledger is pruned (and once at the first cycle).
PRUNE_EVERY_S = 600.0
_RECOVERABLE = {
    FindingKind.PINNED_SESSION,
    FindingKind.ABORT_RPC_STUCK,
    FindingKind.ABORTED_WITH_LIVE_PROCESS,
    FindingKind.ORPHAN_TOOL_PROCESS,
}


class Watchdog:
    """Finds what still pins a session after a stop, and recovers it with the abort walk."""

    def __init__(
        self,
        ledger: Path,
        sink: EventSink,
        flush: Callable[[], object],
        *,
        cfg: Config = DEFAULT_CONFIG,
        recover: bool = True,
        dry_run: bool = False,
        runtime: Runtime | None = None,
        rate_per_min: int = DEFAULT_RATE_PER_MIN,
        observe_scan: Callable[[float], None] | None = None,
        say: Callable[[str], None] = lambda _m: None,
        also: Callable[[], list[Finding]] | None = None,
        retain_s: float | None = None,
        threads: Threads | None = None,
    ) -> None:
        self.ledger = ledger
        #: A LangGraph checkpointer's file: its threads left with unanswered calls.
        self.threads = threads
        #: Findings from outside the ledger (background processes of the agent CLIs).
        self.also = also
        self.sink = sink
        self.cfg = cfg
        self.recover = recover
        self.pacing = Pacing(rate_per_min)
        self.observe_scan = observe_scan
        self.guard = Guard()
        self.runtime = runtime
        self.recoverer = Recoverer(
            self._conn,
            sink,
            flush,
            grace_s=cfg.grace_s,
            runtime=runtime,
            dry_run=dry_run,
            guard=self.guard,
            say=say,
        )
        # Findings already reported as events (by key), among those the last scan still saw.
        self._reported: set[tuple[object, ...]] = set()
        self.say = say
        self._unread: str | None = None  # why the ledger could not be read, while it cannot
        self._damaged: set[str] = set()  # damaged rows of processing sessions, said
        self._serving = False  # in run(): a service outlives an outage of its ledger
        self._unread_threads: str | None = None  # the same, of the checkpointer file
        #: With ``retain_s``, the rows of sessions settled longer ago are pruned (tracing.prune)
        #: at the first cycle and every PRUNE_EVERY_S after, never one with an open finding.
        self.retain_s = retain_s
        self._pruned_at: float | None = None
        self.last_prune: Pruned | None = None

    def _conn(self) -> sqlite3.Connection:
        return connect(self.ledger, readonly=True)

    def scan(self) -> ScanResult:
        return self._completed(self._read())

    def _read(self) -> ScanResult:
        """The ledger's and /proc's part of a scan: blocking, and safe off the loop's thread.
        Beside a runtime, or in :meth:`run`, a ledger that cannot be read is no scan's end: it
        is said once per outage and read again at the next cycle, and what the runtime knows of
        its own sessions is still found. A file a writer is still creating is read as empty."""
        try:
            if self.threads is not None and not self.ledger.exists():
                return self._no_ledger()
            try:
                conn = self._conn()
            except LedgerNotReady:
                if self.runtime is None and not self._serving:
                    raise
                return self._no_ledger()
            try:
                found = scan(conn, cfg=self.cfg)
                found.findings += self._threads(conn, found)
                found.damaged = damaged_summaries(conn, processing=True)
                self._say_damaged(found.damaged)
            finally:
                conn.close()
        except (LedgerError, sqlite3.Error) as exc:
            if self.runtime is None and not self._serving:
                raise
            why = str(exc) if isinstance(exc, LedgerError) else f"{self.ledger}: {exc}"
            if self._unread is None:
                also = "watching the runtime" if self.runtime else "reading it again each scan"
                self.say(f"watchdog: cannot read the ledger ({why}); {also}")
            self._unread = why
            return ScanResult(unread=why)
        if self._unread is not None:
            self.say(f"watchdog: the ledger is readable again ({self.ledger})")
        self._unread = None
        return found

    def _say_damaged(self, damaged: list[str]) -> None:
        """Rows of processing sessions the scan skips as damaged (``tracing.rows``): each said
        once, while it stays; a session it holds is never found pinned, so say why."""
        for d in damaged:
            if d not in self._damaged:
                self.say(f"watchdog: {self.ledger}: {d}: a damaged row, not scanned")
        self._damaged = set(damaged)

    def _no_ledger(self) -> ScanResult:
        """No ledger yet (none there, or a writer creating it): only the LangGraph threads."""
        found = ScanResult(table=ProcessTable.scan() if self.threads is not None else None)
        found.findings = self._threads(None, found)
        return found

    def _threads(self, conn: sqlite3.Connection | None, found: ScanResult) -> list[Finding]:
        """The checkpointer file's dangling threads; one that cannot be read is said once per
        outage, and the rest of the scan goes on."""
        if self.threads is None or found.table is None:
            return []
        try:
            out = self.threads.findings(conn, found.table)
        except ValueError as exc:  # CheckpointFileError
            if self._unread_threads != str(exc):
                self.say(f"watchdog: {exc}")
            self._unread_threads = str(exc)
            return []
        self._unread_threads = None
        return out

    def _completed(self, result: ScanResult) -> ScanResult:
        if self.runtime is not None:  # on the loop's thread: the runtime's state is the loop's
            result.findings = merged(result.findings, runtime_findings(self.runtime, self.cfg))
        if self.also is not None:
            result.findings += self.also()
        if self.observe_scan is not None:
            self.observe_scan(result.duration_s)
        return result

    @property
    def rate_per_min(self) -> int:
        """Recoveries allowed per minute, across sessions (:class:`Pacing`)."""
        return self.pacing.rate_per_min

    @rate_per_min.setter
    def rate_per_min(self, value: int) -> None:
        self.pacing.rate_per_min = value

    async def cycle(self) -> Cycle:
        """Scan once; report new findings; recover what can be recovered."""
        import asyncio

        started = time.perf_counter()
        # Off the loop: a runtime that runs its watchdog beside it (the demo) keeps answering
        # stops while the ledger and /proc are read (tens to hundreds of ms on a busy host).
        result = self._completed(await asyncio.to_thread(self._read))
        out = self._report(result)
        if self.recover:
            out.actions = await self.act(result.findings)
        # A scan that could not read the ledger found none of its findings: pruning after it
        # (the file readable again by then) would take the sessions they keep.
        if result.unread is None and self._prune_due():
            keep = {f.session for f in result.findings}
            self.last_prune = await asyncio.to_thread(self._prune, keep, result.table)
        out.duration_s = time.perf_counter() - started
        return out

    def look(self) -> Cycle:
        """Scan once and report new findings, as :meth:`cycle` does, without recovering or
        pruning anything: nothing to await, so no event loop (``watch --once --no-recover``
        starts without asyncio's ~30 ms of imports)."""
        started = time.perf_counter()
        out = self._report(self._completed(self._read()))
        out.duration_s = time.perf_counter() - started
        return out

    def _report(self, result: ScanResult) -> Cycle:
        """The scan's findings as a cycle; those not reported before, reported (events)."""
        out = Cycle(result.findings, unread=result.unread, damaged=result.damaged)
        current: set[tuple[object, ...]] = {f.key for f in result.findings}
        for f in result.findings:
            if f.key not in self._reported:
                self.sink(
                    wall_event(
                        names.WATCHDOG_FINDING,
                        f.session,
                        turn=f.turn,
                        call=f.call,
                        tool=f.tool,
                        attrs={
                            names.K_FINDING: f.kind,
                            names.K_DETAIL: f.detail,
                            **({names.K_PID: f.pid} if f.pid else {}),
                        },
                    )
                )
        # Only what is still found: memory stays bounded, and a finding that clears and comes
        # back is reported again (and tried again at once). A scan that could not read the
        # ledger cleared nothing: what was reported stays reported.
        if result.unread is None:
            self._reported = current
            self.pacing.keep({f.session for f in result.findings})
        else:
            self._reported |= current
        return out

    def _prune_due(self) -> bool:
        if self.retain_s is None or not self.recover or self.recoverer.dry_run:
            return False  # looking never deletes
        now = time.monotonic()
        if self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY_S:
            return False
        self._pruned_at = now
        return True

    def _prune(self, keep: set[str], table: ProcessTable | None) -> Pruned | None:
        assert self.retain_s is not None
        live = None if table is None else partial(lives, table=table)
        try:
            conn = connect(self.ledger)
            try:
                done = prune(conn, time.time() - self.retain_s, keep=keep, live=live)
            finally:
                conn.close()
        except (LedgerError, sqlite3.Error) as exc:  # tried again at the next due cycle
            self.say(f"watchdog: could not prune the ledger: {exc}")
            return None
        if done.sessions:
            self.say(
                f"watchdog: pruned {done.sessions} session(s) settled more than "
                f"{self.retain_s:g} s ago ({done.events} event(s))"
            )
        return done

    def _repairable(self, f: Finding) -> bool:
        """A dangling thread the watchdog may answer: its run known to be over, or vouched."""
        return (
            f.kind is FindingKind.DANGLING_TOOL_CALLS
            and self.threads is not None
            and (f.action is Action.ANSWER_CALLS or f.session in self.threads.vouched)
        )

    async def act(self, findings: list[Finding], *, dry_run: bool | None = None) -> list[Recovery]:
        """Recover what can be (one action per session or process), report the rest.

        ``dry_run`` overrides the watchdog's own setting for this call (plan, then act).
        """
        import asyncio

        saved = self.recoverer.dry_run
        if dry_run is not None:
            self.recoverer.dry_run = dry_run
        try:
            actions: list[Recovery | Awaitable[Recovery]] = []
            for f in _one_per_target(findings):
                if f.kind not in _RECOVERABLE and not self._repairable(f):
                    actions.append(Recovery(f, f.action, RecoveryResult.REPORT_ONLY))
                elif not self.recoverer.dry_run and (wait := self.pacing.backing_off(f.session)):
                    why = f"backing off {wait:.0f} s after a failed recovery"
                    actions.append(Recovery(f, f.action, RecoveryResult.DEFERRED, why))
                elif not self.recoverer.dry_run and not self.pacing.allowed():
                    actions.append(
                        Recovery(f, f.action, RecoveryResult.DEFERRED, "rate limit reached")
                    )
                else:
                    actions.append(
                        self.threads.repair(f, self.recoverer)
                        if self.threads is not None and self._repairable(f)
                        else self.recoverer.recover(f)
                    )
            # Each on its own target (one per session or process), so all at once: one behind
            # a runtime whose loop is stuck (the control call's 60 s) or a process's grace
            # window no longer waits for it. A bug in one (each says its own failures) lets the
            # others end before it is raised.
            ended = await asyncio.gather(*(_awaited(a) for a in actions), return_exceptions=True)
            done = [r for r in ended if isinstance(r, Recovery)]
            if not self.recoverer.dry_run:
                for recovery in done:
                    self.pacing.note(recovery.finding.session, recovery.result)
            for r in ended:
                if isinstance(r, BaseException):
                    raise r
            return done
        finally:
            self.recoverer.dry_run = saved

    async def run(
        self,
        interval_s: float = DEFAULT_INTERVAL_S,
        stop: asyncio.Event | None = None,
        after_cycle: Callable[[Cycle], object] | None = None,
    ) -> None:
        """Scan every ``interval_s`` until ``stop`` is set.

        At a fixed rate: a slow scan does not push the next one back, so a finding waits at
        most one interval. ``after_cycle`` sees each cycle (the CLI prints and follows metrics).
        """
        import asyncio

        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        self._serving = True
        try:
            while not stop.is_set():
                cycle = await self.cycle()
                if after_cycle is not None:
                    after_cycle(cycle)
                next_at = max(next_at + interval_s, loop.time())
                try:
                    await asyncio.wait_for(stop.wait(), timeout=next_at - loop.time())
                except TimeoutError:
                    continue
        finally:
            self._serving = False


async def _awaited(action: Recovery | Awaitable[Recovery]) -> Recovery:
    return action if isinstance(action, Recovery) else await action


def _one_per_target(findings: list[Finding]) -> list[Finding]:
    """A pinned session and its stuck RPC are one walk; a process is terminated once."""
    seen: set[tuple[str, object]] = set()
    out = []
    for f in findings:
        target: tuple[str, object] = (
            ("walk", f.session)
            if f.kind in (FindingKind.PINNED_SESSION, FindingKind.ABORT_RPC_STUCK)
            else ("pid", f.pid)
            if f.pid is not None
            else (f.kind, f.key)
        )
        if target not in seen:
            seen.add(target)
            out.append(f)
    return out
