"""A prompt a stop closed stays closed across a restart: the runtime that comes after reads what
the one before recorded (``Runtime(past=LedgerCalls(path))``), and an approval sent to it for a
call the stop resolved is late, not unknown (which a wrapper hands to its framework, which then
runs the tool)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import GRACE
from turnwatch import names
from turnwatch.runtime import Answer, EventSink, FanOut, LocalHost, MemorySink, Runtime
from turnwatch.tracing import Ledger
from turnwatch.tracing.past_calls import LedgerCalls
from turnwatch.tracing.pipeline import Telemetry


async def asked_then_stopped(path: Path, *, stop: bool = True, session: str = "s") -> str:
    """A runtime (its process, as far as the ledger knows) that asked to write, then was
    stopped (or not), and is gone: the call id."""
    ledger = Ledger(path)
    rt = Runtime(LocalHost(), grace_s=GRACE, sink=ledger)
    turn = rt.start_turn(session)
    call = turn.request("Write", {"path": "/nonexistent/x", "content": "x"}, ask_permission=True)
    if stop:
        await rt.abort(session)
    ledger.close()
    return call.call_id


async def test_an_approval_after_a_restart_of_a_prompt_the_stop_closed_is_late(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.sqlite3"
    cid = await asked_then_stopped(path)
    sink, ledger = MemorySink(), Ledger(path)
    after = Runtime(LocalHost(), grace_s=GRACE, sink=FanOut(sink, ledger), past=LedgerCalls(path))
    try:
        assert after.answer_permission("s", cid, True) is Answer.LATE
        assert [e.kind for e in sink if e.call == cid] == [names.PERMISSION_LATE]
        with pytest.raises(LookupError):  # a call nobody recorded is still not a prompt of ours
            after.answer_permission("s", "never-asked", True)
    finally:
        ledger.close()


async def test_a_prompt_left_open_by_a_runtime_that_died_is_not_said_late(tmp_path: Path) -> None:
    """No stop closed it: the ledger cannot say the approval comes too late, and it does not."""
    path = tmp_path / "ledger.sqlite3"
    cid = await asked_then_stopped(path, stop=False)
    after = Runtime(LocalHost(), grace_s=GRACE, past=LedgerCalls(path))
    with pytest.raises(LookupError):
        after.answer_permission("s", cid, True)


def test_a_ledger_that_cannot_be_read_proves_nothing(tmp_path: Path) -> None:
    """No file yet, or not a ledger: nothing recorded, so nothing late (and nothing written)."""
    missing = LedgerCalls(tmp_path / "none.sqlite3")
    assert not missing.resolved("s", "c1")
    junk = tmp_path / "junk.sqlite3"
    junk.write_text("not a database")
    assert not LedgerCalls(junk).resolved("s", "c1")
    assert junk.read_text() == "not a database"  # nothing written


@pytest.mark.parametrize("wiring", ["ledger", "telemetry", "fan-out"])
async def test_a_runtime_that_writes_the_ledger_reads_it_unasked(
    tmp_path: Path, wiring: str
) -> None:
    """The runtime's own ledger is what it remembers: no ``past=`` needed (without it, a runtime
    embedded as the README shows ran the tool approved after its restart)."""
    path = tmp_path / "ledger.sqlite3"
    cid = await asked_then_stopped(path)
    ledger = Ledger(path)
    sinks: dict[str, EventSink] = {
        "ledger": ledger,
        "telemetry": Telemetry(ledger=ledger),
        "fan-out": FanOut(MemorySink(), ledger),
    }
    sink = sinks[wiring]
    after = Runtime(LocalHost(), grace_s=GRACE, sink=sink)
    try:
        assert after.answer_permission("s", cid, True) is Answer.LATE
        with pytest.raises(LookupError):
            after.answer_permission("s", "never-asked", True)
    finally:
        ledger.close()


class Forgets:
    """A ``past=`` that remembers nothing."""

    def resolved(self, session: str, call: str) -> bool:
        return False


async def test_past_given_is_what_the_runtime_reads_not_its_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    cid = await asked_then_stopped(path)
    ledger = Ledger(path)
    try:
        after = Runtime(LocalHost(), grace_s=GRACE, sink=ledger, past=Forgets())
        with pytest.raises(LookupError):
            after.answer_permission("s", cid, True)
    finally:
        ledger.close()


async def test_a_sink_that_keeps_no_ledger_remembers_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    cid = await asked_then_stopped(path)
    for sink in (MemorySink(), FanOut(MemorySink()), Telemetry(), None):
        after = Runtime(LocalHost(), grace_s=GRACE, sink=sink)
        assert after.past is None
        with pytest.raises(LookupError):
            after.answer_permission("s", cid, True)


async def test_a_ledger_replaced_under_it_is_read_where_it_now_is(tmp_path: Path) -> None:
    """The ledger moved aside (a damaged one is) and a new one written at its path: what the new
    one records is what is read, not the old file the first question opened."""
    path = tmp_path / "ledger.sqlite3"
    first = await asked_then_stopped(path)
    past = LedgerCalls(path)
    assert past.resolved("s", first)  # opens the file
    path.rename(tmp_path / "ledger.damaged")
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"ledger.sqlite3{suffix}").unlink(missing_ok=True)
    second = await asked_then_stopped(path, session="t")
    assert past.resolved("t", second)
    assert not past.resolved("s", first)  # the old file's, not this one's
    past.close()
