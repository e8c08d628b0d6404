"""Calls whose execution their requester runs in this process (an agent framework's handler).

``Turn.request(run=...)`` and ``Turn.run_call``: a read-only call admitted at once runs in the
caller's own task; other classes run in a task of their own. Each path is stopped here the ways
an integration's calls are: by the runtime's stop, by the caller's own cancellation, or both.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.conftest import until
from turnwatch import names
from turnwatch.runtime import (
    HostResult,
    HostStatus,
    LocalHost,
    MemorySink,
    Outcome,
    Runtime,
    ToolResult,
    Turn,
    TurnOutcome,
)
from turnwatch.testing import check_invariants

OK = HostResult(HostStatus.OK, "done")


@pytest.fixture
def sink() -> MemorySink:
    return MemorySink()


@pytest.fixture
def rt(sink: MemorySink) -> Runtime:
    return Runtime(LocalHost(subreaper=False), sink=sink, grace_s=0.5)


def kinds(sink: MemorySink, call_id: str) -> list[str]:
    return [e.kind for e in sink.events if e.call == call_id]


async def test_a_read_only_call_runs_in_its_callers_task_and_the_stop_discards_it(
    rt: Runtime, sink: MemorySink
) -> None:
    turn = rt.start_turn("s")
    ran_in: list[asyncio.Task[object] | None] = []
    cancelled = asyncio.Event()

    async def read() -> HostResult:
        ran_in.append(asyncio.current_task())
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return OK

    caller = asyncio.ensure_future(turn.run_call("Read", read, tool_class="read_only"))
    await until(lambda: ran_in, what="the read to start")
    assert ran_in == [caller]  # in place: no task of its own
    receipt = await rt.abort("s")
    assert receipt.value == "accepted"
    result = await caller  # the race's cancel was taken back: the caller is not cancelled
    assert result.outcome is Outcome.DISCARDED
    assert cancelled.is_set()
    assert caller.cancelling() == 0
    assert kinds(sink, result.call_id)[-2:] == [names.TOOLS_ABORT_SENT, names.TOOL_RESULT_DISCARDED]
    assert check_invariants(sink.events) == []


async def test_a_read_only_tool_that_swallows_the_cancel_runs_on_but_the_turn_settles(
    rt: Runtime, sink: MemorySink
) -> None:
    turn = rt.start_turn("s")
    started, release, late = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def stubborn() -> HostResult:
        started.set()
        while True:
            try:
                await release.wait()
                break
            except asyncio.CancelledError:
                continue  # a tool that ignores cancellation
        late.set()
        return OK

    caller = asyncio.ensure_future(turn.run_call("Grep", stubborn, tool_class="read_only"))
    await started.wait()
    await rt.abort("s")  # returns although the tool runs on: a read-only call is raced
    assert turn.settled.done()
    assert not late.is_set()
    release.set()
    result = await caller
    assert late.is_set()
    assert result.outcome is Outcome.DISCARDED
    assert caller.cancelling() == 0
    assert names.TOOL_FINISHED not in kinds(sink, result.call_id)  # its late result dropped
    assert check_invariants(sink.events) == []


async def test_the_callers_own_cancellation_beside_the_race_is_not_swallowed(
    rt: Runtime, sink: MemorySink
) -> None:
    turn = rt.start_turn("s")
    started = asyncio.Event()

    async def read() -> HostResult:
        started.set()
        await asyncio.Event().wait()
        return OK

    caller = asyncio.ensure_future(turn.run_call("Read", read, tool_class="read_only"))
    await started.wait()
    caller.cancel()  # the framework cancels its tool task as the stop races the call
    await rt.abort("s")
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert check_invariants(sink.events) == []


async def test_a_mutating_call_runs_apart_from_its_caller_and_is_awaited_at_the_stop(
    rt: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    turn = rt.start_turn("s")
    target = tmp_path / "out.txt"
    halfway = asyncio.Event()

    async def write() -> HostResult:
        with target.open("w") as f:
            for i in range(10):
                f.write(f"{i}\n")
                f.flush()
                if i == 4:
                    halfway.set()
                await asyncio.sleep(0.02)
        return OK

    caller = asyncio.ensure_future(turn.run_call("Write", write, tool_class="mutating"))
    await halfway.wait()
    caller.cancel()  # the framework's own cancel cannot reach the write
    with pytest.raises(asyncio.CancelledError):
        await caller
    await rt.abort("s")  # returns only once the write returned
    assert target.read_text().splitlines() == [str(i) for i in range(10)]
    call = next(iter(turn.calls.values()))
    assert call.result.result().outcome is Outcome.COMPLETED_AFTER_STOP
    assert check_invariants(sink.events) == []


async def test_calls_requested_in_the_tick_of_the_stop_never_run(
    rt: Runtime, sink: MemorySink
) -> None:
    turn = rt.start_turn("s")
    ran: list[str] = []

    def tool(name: str) -> Callable[[], Awaitable[HostResult]]:
        async def run() -> HostResult:
            ran.append(name)
            return OK

        return run

    callers = [
        asyncio.ensure_future(turn.run_call(cls, tool(cls), tool_class=cls))
        for cls in ("read_only", "mutating", "extension")
    ]
    await rt.abort("s")  # the callers' tasks had not run yet
    results = await asyncio.gather(*callers)
    assert ran == []
    assert {r.outcome for r in results} == {Outcome.REFUSED}
    assert check_invariants(sink.events) == []


async def test_a_queued_read_only_call_is_closed_before_it_starts(sink: MemorySink) -> None:
    rt = Runtime(LocalHost(subreaper=False), sink=sink, max_running=1)
    turn = rt.start_turn("s")
    ran: list[int] = []

    async def read() -> HostResult:
        ran.append(1)
        await asyncio.Event().wait()
        return OK

    first = asyncio.ensure_future(turn.run_call("Read", read, tool_class="read_only"))
    second = asyncio.ensure_future(turn.run_call("Read", read, tool_class="read_only"))
    await until(lambda: ran, what="the first read to start")
    await rt.abort("s")
    assert (await first).outcome is Outcome.DISCARDED
    assert (await second).outcome is Outcome.ABORTED
    assert ran == [1]  # the queued one never ran
    assert check_invariants(sink.events) == []


async def test_a_process_call_is_never_run_by_its_requester(rt: Runtime) -> None:
    turn = rt.start_turn("s")

    async def run() -> HostResult:
        return OK

    with pytest.raises(ValueError, match="runs on the host"):
        turn.request("Bash", {}, tool_class="process", run=run)
    with pytest.raises(ValueError, match="runs on the host"):
        await turn.run_call("Bash", run, tool_class="process")


async def test_a_read_only_tool_that_raises_in_place_fails_its_call_with_the_reason(
    rt: Runtime, sink: MemorySink
) -> None:
    turn = rt.start_turn("s")

    async def broken() -> HostResult:
        raise OSError("the index is gone")

    result = await turn.run_call("Grep", broken, tool_class="read_only")
    assert result.outcome is Outcome.FAILED
    assert result.error is not None
    assert "the index is gone" in result.error
    assert (await turn.finish()).value == "completed"
    assert check_invariants(sink.events) == []


class _Held:
    """Stands for what a framework's handler holds: its run context, the tool's return value."""


@pytest.mark.parametrize("how", ["in place", "own task", "refused", "queued, then stopped"])
async def test_a_settled_call_keeps_nothing_of_its_requesters_execution(how: str) -> None:
    """The session keeps its calls for receipts and late answers, not their executions: a
    handler holds the framework's whole run context, and every call would keep it forever."""
    rt = Runtime(LocalHost(subreaper=False), max_running=1)
    turn = rt.start_turn("s")
    held = _Held()
    gone = weakref.ref(held)
    blocker = asyncio.Event()

    def execution(obj: _Held) -> Callable[[], Awaitable[HostResult]]:
        async def run() -> HostResult:
            assert obj is not None
            if how == "queued, then stopped":
                await blocker.wait()
            return OK

        return run

    if how == "refused":
        await rt.abort("s")
        result = await turn.run_call("Read", execution(held), call_id="c", tool_class="read_only")
        assert result.outcome is Outcome.REFUSED
    elif how == "queued, then stopped":
        first = asyncio.ensure_future(turn.run_call("Read", execution(_Held()), call_id="b"))
        queued = asyncio.ensure_future(
            turn.run_call("Read", execution(held), call_id="c", tool_class="read_only")
        )
        await until(lambda: "b" in turn.calls and turn.calls["b"].phase.started, what="b")
        await rt.abort("s")
        assert (await queued).outcome is Outcome.ABORTED
        await first
    else:
        cls = "read_only" if how == "in place" else "mutating"
        result = await turn.run_call("Read", execution(held), call_id="c", tool_class=cls)
        assert result.outcome is Outcome.COMPLETED
    await turn.finish()
    del held
    gc.collect()
    assert "c" in turn.calls  # the call is kept...
    assert gone() is None  # ...its execution is not


async def _a_write_held_open(
    sink: MemorySink, mode: str
) -> tuple[Runtime, Turn, asyncio.Event, asyncio.Future[ToolResult]]:
    """A mutating call of its requester's own, started, that returns once ``gate`` is set."""
    rt = Runtime(LocalHost(subreaper=False), sink=sink, mode=mode)
    turn = rt.start_turn("s")
    gate = asyncio.Event()

    async def write() -> HostResult:
        await gate.wait()
        return OK

    caller = asyncio.ensure_future(turn.run_call("Write", write, tool_class="mutating"))
    await sink.wait_for(names.TOOL_STARTED)
    return rt, turn, gate, caller


@pytest.mark.parametrize("mode", ["adr", "grace_only"])  # the await handler; the grace one
async def test_a_stop_that_meets_an_answer_just_given_takes_it_as_the_result(
    sink: MemorySink, mode: str
) -> None:
    """The execution ends in the very step the stop arrives: its answer is handed over before
    the stop's handler first runs, and the handler finds the call resolved."""
    rt, turn, gate, caller = await _a_write_held_open(sink, mode)
    stopping = asyncio.ensure_future(rt.abort("s"))  # reaches the call in the next step,
    gate.set()  # and the write returns in the same step, just after: before the handler runs
    receipt = await stopping
    assert receipt.value == "accepted"
    assert (await caller).outcome is Outcome.COMPLETED_AFTER_STOP
    (call,) = turn.calls.values()
    assert call.handler is not None  # the stop did meet the call running
    await call.handler  # and its handler found it resolved, without failing
    assert check_invariants(sink.events) == []


async def test_an_answer_given_before_the_stop_ran_is_not_after_the_stop(
    sink: MemorySink,
) -> None:
    """The write returns, then the stop is asked for: the call completed before it, and the
    ledger says so. (Resolved by the execution's done callback, one loop step later, the call
    was once recorded ``completed_after_stop``, as if the stop had reached it running.)"""
    rt, turn, gate, caller = await _a_write_held_open(sink, "adr")
    gate.set()  # the write returns in the next step; the stop is asked for after it
    stopping = asyncio.ensure_future(rt.abort("s"))
    assert (await caller).outcome is Outcome.COMPLETED
    await stopping
    (call,) = turn.calls.values()
    assert call.handler is None  # nothing was left running for the stop to handle
    assert check_invariants(sink.events) == []


async def test_call_handle_phase_is_a_deprecated_alias_of_state(rt: Runtime) -> None:
    turn = rt.start_turn("s")
    handle = turn.request("Read", {"path": "/nonexistent"})
    with pytest.warns(DeprecationWarning, match="use CallHandle.state"):
        assert handle.phase is handle.state
    await handle.result()


async def test_a_turn_never_settles_over_a_call_requested_as_its_last_one_resolved(
    rt: Runtime, sink: MemorySink
) -> None:
    """``finish()`` waits until no call is in flight. A call another task of the agent loop
    requests in the step the last open one resolved in is in flight too: the turn settles after
    it (it settled before it, a mutating call running: invariant 1)."""
    turn = rt.start_turn("s")
    read_done, write_may_end, writing = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def read() -> HostResult:
        await read_done.wait()
        return OK

    async def write() -> HostResult:
        writing.set()
        await write_may_end.wait()
        return OK

    first = turn.request("Read", run=read)

    async def agent_loop() -> None:
        await first.result()  # woken before finish(): its waiter is told first
        turn.request("Write", run=write)

    loop_task = asyncio.ensure_future(agent_loop())
    finished = asyncio.ensure_future(turn.finish())
    await asyncio.sleep(0)  # both wait now
    read_done.set()
    await loop_task
    await writing.wait()
    await asyncio.sleep(0.05)
    assert not turn.settled.done(), "settled while its Write runs"
    write_may_end.set()
    assert await finished is TurnOutcome.COMPLETED
    assert [e.kind for e in sink.events if e.kind in (names.TOOL_FINISHED, names.TURN_SETTLED)] == [
        names.TOOL_FINISHED,
        names.TOOL_FINISHED,
        names.TURN_SETTLED,
    ]
    assert check_invariants(sink.events) == []
