"""ADK's tool confirmations in a wrapped run, stopped: a stop while the confirmed write runs awaits
it whole; a stop while the run that asks is read closes the prompt; a stop after the confirmation
but before ADK runs the tool, or one that released the call before ADK ran it, leaves it never
started; a confirmed command is contained and ended at the stop.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.context import Context
from google.adk.apps import App
from google.adk.runners import InMemoryRunner
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.function_tool import FunctionTool
from google.genai import types

from tests.conftest import until
from tests.integrations.adk_parts import (
    HI,
    TERM_IGNORING_TREE,
    Writes,
    ask_to_write,
    asked,
    call,
    confirm,
    consume,
    history,
    kept,
    kinds,
    model,
    new_session,
    outcome,
    reply,
    responses,
    says,
    wrapped,
)
from tests.integrations.procs import marked_alive
from turnwatch import names
from turnwatch.integrations.google_adk import StoppableRunner, TurnwatchPlugin
from turnwatch.integrations.wrappers import run_command
from turnwatch.runtime import MemorySink, Receipt, Runtime
from turnwatch.testing import check_invariants


@pytest.fixture
def rt(runtime: Runtime) -> Runtime:
    return runtime


async def test_a_stop_while_the_confirmed_write_runs_awaits_it_whole(
    rt: Runtime, sink: MemorySink
) -> None:
    w = Writes()
    runner, app, sid, request = await ask_to_write(rt, w)
    w.release.clear()
    run = asyncio.ensure_future(reply(app, sid, request))
    await until(lambda: w.started, what="the confirmed write")
    live = rt.session(sid).live
    assert live is not None
    stop = asyncio.ensure_future(rt.abort(sid))
    await until(lambda: live.stopping, what="the stop")
    w.release.set()  # the write ends only once the stop is under way
    assert await stop is Receipt.ACCEPTED
    await asyncio.wait_for(run, 10)
    assert w.written == ["a"]
    # Awaited to its end, after the stop: its real result, not an abandoned call's.
    assert outcome(sink, request.id) == "completed_after_stop"
    assert responses(await history(runner, sid), "w1")[-1] == {"result": "written"}
    assert check_invariants(list(sink)) == []


async def test_a_stop_while_the_run_that_asks_is_read_closes_the_prompt(
    rt: Runtime, sink: MemorySink
) -> None:
    """Stop clicked as the request shows, before the run ended: the prompt is closed at once,
    ADK records the request aborted, and the confirmation sent later is late."""
    w = Writes()
    runner, app = wrapped(rt, [w.tool], model(says(call("w1", "write", text="a"))))
    sid = await new_session(runner)
    requests: list[types.FunctionCall] = []
    async for event in app.run_async(user_id="u", session_id=sid, new_message=HI):
        if asked([event]) and not requests:
            requests += asked([event])
            assert await rt.abort(sid) is Receipt.ACCEPTED
    (request,) = requests
    assert rt.session(sid).live is None
    assert names.PERMISSION_CANCELLED in kinds(sink, request.id)
    assert not kept(app, sid)  # nothing of the settled turn is kept for a run that never comes
    await reply(app, sid, request)
    assert w.written == []
    assert names.PERMISSION_LATE in kinds(sink, request.id)
    assert check_invariants(list(sink)) == []


async def test_a_stop_after_the_confirmation_before_adk_runs_the_tool_never_starts_it(
    rt: Runtime, sink: MemorySink
) -> None:
    """Confirmed, then Stop clicked before ADK re-ran the tool (its callbacks still running):
    the prompt's call never starts, and ADK's re-run is answered "not run"."""
    w = Writes()
    held, go = asyncio.Event(), asyncio.Event()

    async def slow_callback(
        tool: BaseTool, args: dict[str, Any], tool_context: Context
    ) -> dict[str, Any] | None:
        held.set()
        await go.wait()
        return None

    agent = LlmAgent(
        name="a",
        model=model(says(call("w1", "write", text="a"))),
        tools=[w.tool],
        before_tool_callback=slow_callback,
    )
    plugin = TurnwatchPlugin(rt, [w.tool])
    runner = InMemoryRunner(app=App(name="app", root_agent=agent, plugins=[plugin]))
    app = StoppableRunner(runner, rt)
    sid = await new_session(runner)
    go.set()
    (request,) = asked(await consume(app.run_async(user_id="u", session_id=sid, new_message=HI)))
    held.clear()
    go.clear()
    answer = confirm(request, True)
    run = asyncio.ensure_future(
        consume(app.run_async(user_id="u", session_id=sid, new_message=answer))
    )
    await asyncio.wait_for(held.wait(), 10)
    assert await rt.abort(sid) is Receipt.ACCEPTED
    go.set()
    await asyncio.wait_for(run, 10)
    assert w.started == []  # the stop came first: it never started
    assert names.TOOL_STARTED not in kinds(sink, request.id)
    assert "not run" in str(responses(await history(runner, sid), "w1")[-1]).lower()
    assert rt.session(sid).live is None
    assert check_invariants(list(sink)) == []


async def test_a_confirmed_call_the_stop_released_before_adk_ran_it_is_not_run(
    rt: Runtime, sink: MemorySink
) -> None:
    """Two confirmed writes: the stop comes while one runs and ADK has not yet run the other.
    The one running is awaited (the turn waits for it); the other, released by the stop while
    it waited for ADK, is answered "not run" when ADK gets to it, and never starts."""
    w, other = Writes(), Writes()
    other.tool.name = "note"  # (the same write, under another name)
    held, go = asyncio.Event(), asyncio.Event()

    async def slow_callback(
        tool: BaseTool, args: dict[str, Any], tool_context: Context
    ) -> dict[str, Any] | None:
        if tool.name == "note" and not go.is_set():
            held.set()
            await go.wait()
        return None

    step = says(call("w1", "write", text="a"), call("n1", "note", text="b"))
    agent = LlmAgent(
        name="a", model=model(step), tools=[w.tool, other.tool], before_tool_callback=slow_callback
    )
    plugin = TurnwatchPlugin(rt, [w.tool, other.tool])
    runner = InMemoryRunner(app=App(name="app", root_agent=agent, plugins=[plugin]))
    app = StoppableRunner(runner, rt)
    sid = await new_session(runner)
    go.set()
    requests = asked(await consume(app.run_async(user_id="u", session_id=sid, new_message=HI)))
    assert len(requests) == 2
    go.clear()
    w.release.clear()
    parts = [p for r in requests for p in confirm(r, True).parts or ()]
    answer = types.Content(role="user", parts=parts)
    run = asyncio.ensure_future(
        consume(app.run_async(user_id="u", session_id=sid, new_message=answer))
    )
    await asyncio.wait_for(held.wait(), 10)
    await until(lambda: w.started, what="the confirmed write")
    stop = asyncio.ensure_future(rt.abort(sid))
    live = rt.session(sid).live
    assert live is not None
    noted = next(r.id for r in requests if r.args and r.args["originalFunctionCall"]["id"] == "n1")
    assert noted is not None
    await until(lambda: live.calls[noted].phase.terminal, what="the stop to release the note")
    go.set()  # ADK goes on to the note, released already
    # ADK's run of the note is over once its slot is: answered while the write held the turn.
    await until(lambda: (sid, noted) not in app.dispatch.slots, what="ADK's run of the note")
    w.release.set()
    assert await stop is Receipt.ACCEPTED
    await asyncio.wait_for(run, 10)
    assert w.written == ["a"]  # awaited whole
    assert other.started == []  # released before ADK ran it: never started
    said = await history(runner, sid)
    assert responses(said, "w1")[-1] == {"result": "written"}
    assert "not run" in str(responses(said, "n1")[-1]).lower()
    assert not kept(app, sid)
    assert check_invariants(list(sink)) == []


async def test_a_confirmed_command_is_contained_and_ended_at_the_stop(
    rt: Runtime, sink: MemorySink
) -> None:
    """A process tool behind a confirmation: once confirmed, its command runs as the prompt's
    call, contained; a stop ends its tree (it ignores SIGTERM) within the grace window."""

    async def sh() -> str:
        """a shell command the user must confirm"""
        return (await run_command(["bash", "-c", TERM_IGNORING_TREE])).output

    tool = FunctionTool(sh, require_confirmation=True)
    tool.custom_metadata = {"turnwatch_class": "process"}
    runner, app = wrapped(rt, [tool], model(says(call("p1", "sh"))))
    sid = await new_session(runner)
    (request,) = asked(await consume(app.run_async(user_id="u", session_id=sid, new_message=HI)))
    answer = confirm(request, True)
    run = asyncio.ensure_future(
        consume(app.run_async(user_id="u", session_id=sid, new_message=answer))
    )
    await until(lambda: len(marked_alive(sid)) >= 3, what="the confirmed command")
    assert await rt.abort(sid) is Receipt.ACCEPTED
    assert marked_alive(sid) == []  # nothing of it outlived abort()
    await asyncio.wait_for(run, 10)
    assert "ended" in str(responses(await history(runner, sid), "p1")[-1])
    finished = [e.attrs.get("outcome") for e in sink if e.kind == names.TOOL_FINISHED]
    assert finished == ["aborted"]
    assert not kept(app, sid)
    assert check_invariants(list(sink)) == []
