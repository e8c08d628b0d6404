"""LangGraph threads a stopped or dead run left with unanswered tool calls
(``dangling_tool_calls``): found in a SQLite checkpointer's file, joined to the ledger, and
repaired through the application's graph with the messages a wrapped stop writes.

A thread is joined to the ledger's session of the same id (``StoppableGraph(…).ainvoke(…,
cfg, session=thread_id)``). Its run is **known to be over** when that session's runtime is gone
(pid and start time), or its last turn settled after the checkpoint was written; then the
watchdog answers the calls itself. Otherwise (a native run, in a process turnwatch does not
know) a thread quiet for ``quiet_s`` is reported, and only ``turnwatch recover`` answers it,
after its operator says the run is over: a write into a live run's thread would fork its
history.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turnwatch import names
from turnwatch.runtime.model import FindingKind, RecoveryResult
from turnwatch.runtime.procfs import ProcessTable
from turnwatch.tracing import view
from turnwatch.tracing.batchsql import select_in
from turnwatch.watchdog.scan import Action, Finding

if TYPE_CHECKING:
    from turnwatch.integrations.langgraph_checkpoints import CheckpointFile, Dangling
    from turnwatch.watchdog.recover import Recoverer, Recovery

#: How long a thread no turnwatch session accounts for must be quiet before it is reported.
DEFAULT_QUIET_S = 300.0
#: The detail of a thread whose run is not known to be over.
UNPROVEN = "whether its run is over is not known"


@dataclass
class Threads:
    """The watchdog's look at a LangGraph SQLite checkpointer file (the ``langgraph`` extra).

    ``graph``: the application's compiled graph, which the repair writes through (its
    channels and reducers); without it the findings are reported only."""

    path: Path
    graph: Any = None
    quiet_s: float = DEFAULT_QUIET_S

    def __post_init__(self) -> None:
        from turnwatch.integrations.langgraph_checkpoints import CheckpointFile

        self._file: CheckpointFile = CheckpointFile(self.path)
        #: Threads an operator said are over (``recover``): answered though not proven.
        self.vouched: set[str] = set()

    def findings(
        self, conn: sqlite3.Connection | None, table: ProcessTable, now: float | None = None
    ) -> list[Finding]:
        """A finding per dangling thread, joined to the ledger (``conn``; None: no ledger)."""
        now = time.time() if now is None else now
        left = self._file.scan()
        rows = _sessions(conn, [d.thread for d in left])
        out = []
        for d in left:
            row = rows.get(d.thread)
            if row is not None and row["processing"]:
                if table.alive(row["runtime_pid"], view.runtime_start(row)):
                    continue  # its run goes on: the runtime answers its calls at its stop
                proof = f"its runtime pid {row['runtime_pid']} is gone"
            elif row is not None and (row["settled_ts"] or 0.0) >= d.ts:
                proof = "its turn settled after the checkpoint was written"
            elif now - d.ts < self.quiet_s:
                continue  # a tools step that may still be under way
            else:
                proof = ""
            out.append(self._finding(d, row, proof))
        return out

    def _finding(self, d: Dangling, row: Any, proof: str) -> Finding:
        calls = ", ".join(f"{name} {cid}" for cid, name in d.calls)
        why = proof or f"{UNPROVEN}; quiet since its checkpoint"
        return Finding(
            FindingKind.DANGLING_TOOL_CALLS,
            d.thread,
            row["turn"] if row is not None else None,
            since=d.ts,
            detail=f"{len(d.calls)} call(s) unanswered in {self.path.name}: {calls} ({why})",
            action=Action.ANSWER_CALLS if proof else Action.REPORT,
        )

    async def repair(self, f: Finding, recoverer: Recoverer) -> Recovery:
        """Answer the thread's calls, each with what the ledger recorded of it (the stop's
        words), else "not known"; recorded as ``watchdog.recovered``."""
        from turnwatch.integrations import langgraph_checkpoints as lc
        from turnwatch.watchdog.recover import Recovery

        words = f"answer the calls in {self.path}"
        if f.action is not Action.ANSWER_CALLS and f.session not in self.vouched:
            return Recovery(f, Action.REPORT, RecoveryResult.REPORT_ONLY, UNPROVEN, words)
        if self.graph is None:
            why = "no graph to write through (--langgraph-graph MODULE:ATTR)"
            return Recovery(f, Action.REPORT, RecoveryResult.REPORT_ONLY, why, words)
        if recoverer.dry_run:
            return Recovery(f, Action.ANSWER_CALLS, RecoveryResult.DRY_RUN, "", words)
        import asyncio  # here: the watchdog's look imports this module and runs no loop

        try:
            outcomes = await asyncio.to_thread(self._outcomes, recoverer, f.session)
            said = {cid: lc.recorded_words(o) for cid, o in outcomes.items()}
            done = await lc.repair(self.graph, self.path, f.session, said)
        except Exception as exc:  # the application's graph, its file: said, tried again
            why = f"{type(exc).__name__}: {exc}"
            recoverer.record(names.WATCHDOG_RECOVERED, f, result=RecoveryResult.FAILED, error=why)
            return Recovery(f, Action.ANSWER_CALLS, RecoveryResult.FAILED, why, words)
        answered = {names.K_ANSWERED: done}
        recoverer.record(
            names.WATCHDOG_RECOVERED, f, result=RecoveryResult.OK, action=words, **answered
        )
        return Recovery(f, Action.ANSWER_CALLS, RecoveryResult.OK, f"{len(done)} answered", words)

    @staticmethod
    def _outcomes(recoverer: Recoverer, session: str) -> dict[str, str | None]:
        """The outcome the ledger recorded of each call of ``session`` (by call id)."""
        try:
            conn = recoverer.conn_factory()
        except Exception:
            return {}  # no ledger: every call "not known"
        try:
            rows = conn.execute("SELECT call, outcome FROM calls WHERE session = ?", (session,))
            return {r["call"]: r["outcome"] for r in rows}
        finally:
            conn.close()


def _sessions(conn: sqlite3.Connection | None, ids: list[str]) -> dict[str, Any]:
    if conn is None or not ids:
        return {}
    sql = "SELECT * FROM sessions WHERE session IN ({marks})"
    return {r["session"]: r for r in select_in(conn, sql, ids)}
