"""A session served again after a restart goes on from the turns its ledger records.

A runtime numbers a session's turns from 1 (``{session}.t1``), and the calls it names itself
from its turn's id (``{session}.t1.c1``). After a restart (a deploy, a crash) the new runtime
numbered a session the ledger already knew from 1 again: its turn had the id of a turn recorded
before, its calls the ids of calls recorded before (design §1: a new turn uses call ids never
used before in that session), and the ledger could no longer tell them apart: the new turn's
call and the dead runtime's open prompt were one row of ``calls``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.conftest import GRACE
from tests.tracing.test_past_calls import Forgets, asked_then_stopped
from turnwatch.runtime import LocalHost, MemorySink, Runtime
from turnwatch.tracing import Ledger
from turnwatch.tracing.past_calls import LedgerCalls


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


async def test_a_session_served_again_after_a_restart_numbers_its_turns_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.sqlite3"
    died_asking = await asked_then_stopped(path, stop=False)  # s.t1, its prompt left open
    assert died_asking == "s.t1.c1"
    ledger = Ledger(path)
    after = Runtime(LocalHost(), grace_s=GRACE, sink=ledger)
    turn = after.start_turn("s")
    call = turn.request("Write", {"path": "/nonexistent/x", "content": "x"}, ask_permission=True)
    await after.abort("s")
    ledger.close()
    assert (turn.id, call.call_id) == ("s.t2", "s.t2.c1")
    started = rows(path, "SELECT turn FROM events WHERE kind = 'turn.started' ORDER BY seq")
    assert started == [("s.t1",), ("s.t2",)]
    # Two calls, two rows: the dead runtime's prompt is still open, the new one closed.
    calls = rows(path, "SELECT call, turn, ended_ts IS NULL FROM calls ORDER BY call")
    assert calls == [("s.t1.c1", "s.t1", 1), ("s.t2.c1", "s.t2", 0)]


async def test_each_life_goes_on_from_the_last_and_other_sessions_from_their_own(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.sqlite3"
    seen: list[str] = []
    for _life in range(3):
        ledger = Ledger(path)
        rt = Runtime(LocalHost(), grace_s=GRACE, sink=ledger)
        for session in ("s", "s", "other"):
            turn = rt.start_turn(session)
            seen.append(turn.id)
            await turn.finish()
        ledger.close()
    assert seen == [
        *("s.t1", "s.t2", "other.t1"),
        *("s.t3", "s.t4", "other.t2"),
        *("s.t5", "s.t6", "other.t3"),
    ]


async def test_a_turn_named_by_its_caller_last_does_not_hide_the_numbered_ones(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    rt = Runtime(LocalHost(), grace_s=GRACE, sink=ledger)
    for turn_id in (None, None, "s.deploy-42"):
        await rt.start_turn("s", turn_id).finish()
    ledger.close()
    assert LedgerCalls(path).last_turn("s") == 2
    ledger = Ledger(path)
    try:
        assert Runtime(LocalHost(), grace_s=GRACE, sink=ledger).start_turn("s").id == "s.t3"
    finally:
        ledger.close()


async def test_without_a_ledger_or_a_past_that_counts_turns_they_start_from_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.sqlite3"
    await asked_then_stopped(path)
    assert Runtime(LocalHost(), grace_s=GRACE, sink=MemorySink()).start_turn("s").id == "s.t1"
    # A past= of its own without last_turn (written before it existed) still works.
    assert Runtime(LocalHost(), grace_s=GRACE, past=Forgets()).start_turn("s").id == "s.t1"
    assert LedgerCalls(tmp_path / "none.sqlite3").last_turn("s") == 0
