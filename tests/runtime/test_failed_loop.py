"""An agent loop that raises while calls of its turn still run (``Turn.finish(FAILED)``): nobody
will take those calls' results. They are released as a stop releases them, a turn abort
(``TOOL_ABORTED``): the process call ended within the grace window, the read-only one
discarded, the write awaited whole, a prompt closed; the turn is recorded ``failed``.

Before, ``finish(FAILED)`` waited for every call to end of itself: a Bash that ignores SIGTERM
held the turn (and the session "processing", and the wrapped run's caller) for as long as it
ran, and nothing ended it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.conftest import GRACE, Procs
from turnwatch import names
from turnwatch.runtime import (
    Answer,
    HostResult,
    HostStatus,
    LocalHost,
    MemorySink,
    Outcome,
    Runtime,
    TurnOutcome,
)
from turnwatch.testing import check_invariants

SLACK_S = 5.0


async def test_a_raising_loop_ends_its_process_call_within_the_grace_window(
    sink: MemorySink, procs: Procs, tmp_path: Path
) -> None:
    rt = Runtime(LocalHost(), grace_s=GRACE, sink=sink)
    turn = rt.start_turn("s")
    bash = turn.request("Bash", {"command": "trap '' TERM; echo up; sleep 300"})
    await sink.wait_for(names.TOOL_PROGRESS, call=bash.call_id)
    procs.track(sink.of(names.TOOL_STARTED, call=bash.call_id)[0].attrs["pid"])
    written = asyncio.Event()

    async def write() -> HostResult:
        await asyncio.sleep(0.2)
        written.set()
        return HostResult(HostStatus.OK, "written")

    edit = turn.request("Edit", {"path": str(tmp_path / "f")}, tool_class="mutating", run=write)
    ask = turn.request("Write", {"path": str(tmp_path / "g")}, ask_permission=True)
    # The loop raised here. Bounded by the grace window, not by the Bash (300 s).
    outcome = await asyncio.wait_for(turn.finish(TurnOutcome.FAILED), GRACE + SLACK_S)
    assert outcome is TurnOutcome.FAILED
    assert (await bash.result()).outcome is Outcome.ABORTED
    assert (await bash.result()).error_code == names.TOOL_ABORTED
    assert procs.alive() == []
    assert written.is_set()  # the write was awaited whole, not abandoned
    assert (await edit.result()).outcome is Outcome.COMPLETED_AFTER_STOP
    assert (await ask.result()).outcome is Outcome.ABORTED  # closed before it started
    assert rt.answer_permission("s", ask.call_id, True) is Answer.LATE
    settled = sink.of(names.TURN_SETTLED)
    assert [e.attrs[names.K_OUTCOME] for e in settled] == ["failed"]
    assert not rt.session("s").processing
    assert check_invariants(sink.events) == []


async def test_a_raising_loop_with_nothing_in_flight_settles_failed_and_runs_no_walk(
    sink: MemorySink,
) -> None:
    rt = Runtime(LocalHost(), sink=sink)
    turn = rt.start_turn("s")
    assert await turn.finish(TurnOutcome.FAILED) is TurnOutcome.FAILED
    assert sink.of(names.ABORT_WALK_STARTED) == []
    assert sink.of(names.ABORT_RPC_RECEIVED) == []
