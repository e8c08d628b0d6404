"""Nested runs (``Runtime.start_turn(parent=)``): a run a tool of another turn starts. A stop of
the parent stops its children first and settles after them; a run its tool asks for after the
stop began never starts (invariant 2: a stopped call starts nothing)."""

from __future__ import annotations

import asyncio

import pytest

from turnwatch import names
from turnwatch.runtime import (
    HostResult,
    HostStatus,
    LocalHost,
    MemorySink,
    Outcome,
    ParentStoppedError,
    Receipt,
    Runtime,
    StopSource,
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


def settled(sink: MemorySink) -> list[str]:
    return [e.session for e in sink.events if e.kind == names.TURN_SETTLED]


async def test_a_child_live_at_the_stop_is_stopped_first_and_the_parent_settles_after_it(
    rt: Runtime, sink: MemorySink
) -> None:
    parent = rt.start_turn("outer")
    child_running = asyncio.Event()

    async def child_write() -> HostResult:
        child_running.set()
        await asyncio.sleep(0.2)  # awaited whole by the child's stop
        return OK

    async def delegate() -> HostResult:
        child = rt.start_turn("inner", parent=parent)
        result = await child.run_call("Write", child_write)
        await child.finish()
        return HostResult(HostStatus.OK, result.outcome.value)

    call = parent.request("Delegate", tool_class="extension", run=delegate)
    await child_running.wait()
    assert await rt.abort("outer") is Receipt.ACCEPTED
    assert settled(sink) == ["inner", "outer"]
    assert (await call.result()).output == Outcome.COMPLETED_AFTER_STOP.value
    sources = {
        e.session: e.attrs[names.K_SOURCE]
        for e in sink.events
        if e.kind == names.ABORT_RPC_RECEIVED
    }
    assert sources == {"outer": "ui", "inner": "ui"}
    assert check_invariants(sink.events) == []


@pytest.mark.parametrize("tool", ["Read", "Write", "Bash"])
async def test_a_run_asked_for_after_the_parents_stop_began_never_starts(
    rt: Runtime, sink: MemorySink, tool: str
) -> None:
    """An awaited call is still running when the stop comes, and asks for a nested run only
    then: nothing of that run starts, and the parent settles once the call has ended."""
    parent = rt.start_turn("outer")
    stop_came, ran = asyncio.Event(), []

    async def child_tool() -> HostResult:
        ran.append(tool)
        return OK

    async def delegate() -> HostResult:
        await stop_came.wait()  # slow work of its own, the stop meanwhile
        try:
            child = rt.start_turn("inner", parent=parent)
        except ParentStoppedError as exc:
            return HostResult(HostStatus.ERROR, error=str(exc))
        if tool == "Bash":
            await child.request(tool, {"command": "echo started"}).result()
        else:
            await child.run_call(tool, child_tool)
        await child.finish()
        return OK

    call = parent.request("Delegate", tool_class="extension", run=delegate)
    stop = asyncio.ensure_future(rt.abort("outer", source=StopSource.UI))
    await asyncio.sleep(0.05)
    assert not stop.done()  # the extension call is awaited
    stop_came.set()
    assert await asyncio.wait_for(stop, 5) is Receipt.ACCEPTED
    assert ran == []
    result = await call.result()
    assert result.outcome is Outcome.FAILED
    assert "stopped" in (result.error or "")
    assert not [e for e in sink.events if e.session == "inner"], "nothing of the nested run"
    assert settled(sink) == ["outer"]
    assert parent.settled.result() is TurnOutcome.ABORTED
    assert check_invariants(sink.events) == []


async def test_a_parent_that_completed_still_names_a_run_its_tool_started_later(
    rt: Runtime, sink: MemorySink
) -> None:
    """Only a stop refuses: a run started from a completed turn's tool (a task it left behind)
    is a run of its own, its parent named."""
    parent = rt.start_turn("outer")
    assert await parent.finish() is TurnOutcome.COMPLETED
    child = rt.start_turn("inner", parent=parent)
    assert await child.finish() is TurnOutcome.COMPLETED
    started = next(e for e in sink.events if e.session == "inner" and e.kind == names.TURN_STARTED)
    assert started.attrs[names.K_PARENT_SESSION] == "outer"
