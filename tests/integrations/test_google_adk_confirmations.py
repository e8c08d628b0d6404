"""ADK's tool confirmations in a wrapped run: the turn's pending permissions.

A tool that requires confirmation (``FunctionTool(…, require_confirmation=True)``, or one that
calls ``tool_context.request_confirmation()`` itself) ends ADK's run with an
``adk_request_confirmation`` call for the user to answer in the next run. Until it is answered
a permission can still be approved: the turn does not settle (invariant 1), and a stop while it
waits closes the prompt, so a confirmation sent after the stop never runs the tool.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.context import Context
from google.adk.apps import App, ResumabilityConfig
from google.adk.events import Event
from google.adk.runners import InMemoryRunner
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from tests.conftest import until
from tests.integrations.adk_parts import (
    HI,
    TERM_IGNORING_TREE,
    call,
    consume,
    history,
    model,
    new_session,
    says,
    wrapped,
)
from tests.integrations.procs import marked_alive
from turnwatch import names
from turnwatch.integrations import google_adk_confirmations as confirmations
from turnwatch.integrations.google_adk import StoppableRunner, TurnwatchPlugin
from turnwatch.integrations.wrappers import Dispatcher, dispatcher, run_command
from turnwatch.runtime import MemorySink, Receipt, Runtime
from turnwatch.runtime.model import Phase
from turnwatch.testing import check_invariants

CONFIRM = "adk_request_confirmation"
OK = says(types.Part(text="ok"))


@pytest.fixture
def rt(runtime: Runtime) -> Runtime:
    return runtime


class Writes:
    """A write that requires confirmation (ADK's gate), and what it wrote."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.written: list[str] = []
        self.release = asyncio.Event()
        self.release.set()

        async def write(text: str) -> str:
            """a write the user must confirm"""
            self.started.append(text)
            await self.release.wait()
            self.written.append(text)
            return "written"

        self.tool = FunctionTool(write, require_confirmation=True)
        self.tool.custom_metadata = {"turnwatch_class": "mutating"}


def asked(events: list[Any]) -> list[types.FunctionCall]:
    """The confirmations the run asked for."""
    return [c for e in events for c in e.get_function_calls() if c.name == CONFIRM]


def confirm(request: types.FunctionCall, confirmed: bool) -> types.Content:
    """The user's answer to ``request``, as ADK's web UI sends it."""
    response = types.FunctionResponse(
        name=CONFIRM, id=request.id, response={"confirmed": confirmed}
    )
    return types.Content(role="user", parts=[types.Part(function_response=response)])


def kinds(sink: MemorySink, call_id: str | None) -> list[str]:
    return [e.kind for e in sink if e.call == call_id]


def outcome(sink: MemorySink, call_id: str | None) -> object:
    """How the call ended, as the ledger has it."""
    (ended,) = [e for e in sink if e.kind == names.TOOL_FINISHED and e.call == call_id]
    return ended.attrs.get("outcome")


def responses(events: list[Any], call_id: str) -> list[dict[str, Any]]:
    """Every function response to ``call_id`` in the history, in order."""
    return [
        dict(r.response or {})
        for e in events
        for r in e.get_function_responses()
        if r.id == call_id
    ]


def kept(app: StoppableRunner, session: str) -> list[object]:
    """What the wrapper keeps of ``session``'s calls (slots, renamed ids)."""
    return kept_of(app.dispatch, session)


def kept_of(d: Dispatcher, session: str) -> list[object]:
    return [k for k in [*d.slots, *d.renamed] if k[0] == session]


async def reply(
    app: StoppableRunner, sid: str, request: types.FunctionCall, confirmed: bool = True
) -> list[Any]:
    """The run the user's answer to ``request`` makes: its events."""
    return await consume(
        app.run_async(user_id="u", session_id=sid, new_message=confirm(request, confirmed))
    )


async def ask_to_write(rt: Runtime, w: Writes, *steps: types.Content) -> tuple[Any, Any, str, Any]:
    """A run whose model asks to write: it ends asking for the write's confirmation."""
    runner, app = wrapped(rt, [w.tool], model(says(call("w1", "write", text="a")), *steps))
    sid = await new_session(runner)
    events = await consume(app.run_async(user_id="u", session_id=sid, new_message=HI))
    (request,) = asked(events)
    return runner, app, sid, request


async def test_a_turn_waiting_on_a_confirmation_does_not_settle(
    rt: Runtime, sink: MemorySink
) -> None:
    w = Writes()
    _, _, sid, request = await ask_to_write(rt, w)
    live = rt.session(sid).live
    assert live is not None  # a permission can still be approved: not settled
    (prompt,) = live.calls.values()
    assert prompt.call_id == request.id
    assert prompt.tool == "write"
    assert prompt.phase is Phase.AWAITING_PERMISSION
    assert names.PERMISSION_REQUESTED in kinds(sink, request.id)
    assert names.TURN_SETTLED not in [e.kind for e in sink]
    assert w.written == []


async def test_a_confirmation_runs_the_write_in_the_turn_that_asked(
    rt: Runtime, sink: MemorySink
) -> None:
    w = Writes()
    runner, app, sid, request = await ask_to_write(rt, w)
    turn = rt.session(sid).live
    assert turn is not None
    await reply(app, sid, request)
    assert w.written == ["a"]
    assert turn.settled.done()
    assert rt.session(sid).live is None
    assert [k for k in kinds(sink, request.id) if k.startswith(("permission.", "tool."))] == [
        names.TOOL_REQUESTED,
        names.PERMISSION_REQUESTED,
        names.PERMISSION_GRANTED,
        names.TOOL_STARTED,
        names.TOOL_FINISHED,
    ]
    assert [e.turn for e in sink if e.kind == names.TURN_STARTED] == [turn.id]  # one turn
    assert not kept(app, sid)
    assert responses(await history(runner, sid), "w1")[-1] == {"result": "written"}
    assert check_invariants(list(sink)) == []


async def test_a_rejection_is_the_prompts_denial(rt: Runtime, sink: MemorySink) -> None:
    w = Writes()
    runner, app, sid, request = await ask_to_write(rt, w)
    await reply(app, sid, request, False)
    assert w.written == []
    assert names.PERMISSION_DENIED in kinds(sink, request.id)
    assert rt.session(sid).live is None
    assert "rejected" in responses(await history(runner, sid), "w1")[-1]["error"]
    assert check_invariants(list(sink)) == []


async def test_a_confirmation_sent_after_the_stop_never_runs_the_write(
    rt: Runtime, sink: MemorySink
) -> None:
    w = Writes()
    runner, app, sid, request = await ask_to_write(rt, w)
    assert await rt.abort(sid) is Receipt.ACCEPTED
    assert rt.session(sid).live is None  # the stop closed the prompt and settled the turn
    await reply(app, sid, request)
    assert w.written == []  # the tool never ran
    assert names.PERMISSION_LATE in kinds(sink, request.id)
    assert not kept(app, sid)
    assert "rejected" in responses(await history(runner, sid), "w1")[-1]["error"]
    assert rt.session(sid).live is None
    assert check_invariants(list(sink)) == []


@pytest.mark.parametrize(
    "said", [{"confirmed": [1]}, {"response": "not json"}, {"confirmed": True, "extra": 1}]
)
async def test_a_confirmation_adk_cannot_read_is_said_and_loses_nothing(
    rt: Runtime, sink: MemorySink, said: dict[str, Any]
) -> None:
    """A malformed answer is one clear error, before anything runs: the turn still waits on its
    prompt (it is not taken for "another message", which would stop it), and the answer sent
    again, well formed, goes on."""
    w = Writes()
    runner, app, sid, request = await ask_to_write(rt, w)
    waiting, before = rt.session(sid).live, len(await history(runner, sid))
    response = types.FunctionResponse(name=CONFIRM, id=request.id, response=said)
    bad = types.Content(role="user", parts=[types.Part(function_response=response)])
    with pytest.raises(ValueError, match=f"confirmation {request.id}: ") as told:
        await consume(app.run_async(user_id="u", session_id=sid, new_message=bad))
    assert "\n" not in str(told.value)  # one line
    assert rt.session(sid).live is waiting  # still waiting, its prompt open
    assert len(await history(runner, sid)) == before  # no run started: nothing recorded
    await reply(app, sid, request)
    assert w.written == ["a"]
    assert check_invariants(list(sink)) == []


async def test_another_message_while_it_waits_abandons_the_confirmation(
    rt: Runtime, sink: MemorySink
) -> None:
    w = Writes()
    _runner, app, sid, request = await ask_to_write(rt, w, OK)
    waited = rt.session(sid).live
    assert waited is not None
    await consume(app.run_async(user_id="u", session_id=sid, new_message=HI))
    assert waited.settled.done()
    assert waited.stopping
    await reply(app, sid, request)
    assert w.written == []
    assert names.PERMISSION_LATE in kinds(sink, request.id)
    assert check_invariants(list(sink)) == []


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


@pytest.mark.filterwarnings("ignore:.*ResumabilityConfig:UserWarning")  # ADK's "experimental"
@pytest.mark.parametrize("stopped", [False, True])
async def test_a_resumable_apps_invocation_resumed_by_the_answer(
    rt: Runtime, sink: MemorySink, stopped: bool
) -> None:
    """A resumable app (``ResumabilityConfig``) resumes the paused invocation with the answer
    (``invocation_id=``): the same turn goes on, or, after a stop, the answer is refused."""
    w = Writes()
    agent = LlmAgent(name="a", model=model(says(call("w1", "write", text="a"))), tools=[w.tool])
    plugin = TurnwatchPlugin(rt, [w.tool])
    resumable = ResumabilityConfig(is_resumable=True)
    app_ = App(name="app", root_agent=agent, plugins=[plugin], resumability_config=resumable)
    runner = InMemoryRunner(app=app_)
    app = StoppableRunner(runner, rt)
    sid = await new_session(runner)
    events = await consume(app.run_async(user_id="u", session_id=sid, new_message=HI))
    (request,) = asked(events)
    if stopped:
        await rt.abort(sid)
    answer = confirm(request, True)
    resumed = app.run_async(
        user_id="u", session_id=sid, new_message=answer, invocation_id=events[-1].invocation_id
    )
    await consume(resumed)
    assert w.written == ([] if stopped else ["a"])
    assert (names.PERMISSION_LATE if stopped else names.PERMISSION_GRANTED) in kinds(
        sink, request.id
    )
    assert rt.session(sid).live is None
    assert check_invariants(list(sink)) == []


class AsksItself:
    """A tool that asks its user for confirmation itself, then runs once confirmed."""

    def __init__(self) -> None:
        self.ran: list[bool | None] = []

        async def pay(amount: int, tool_context: ToolContext) -> str:
            """a payment the user confirms"""
            confirmation = tool_context.tool_confirmation
            self.ran.append(None if confirmation is None else confirmation.confirmed)
            if confirmation is None:
                tool_context.request_confirmation(hint=f"pay {amount}?")
                return "asked"
            return "paid" if confirmation.confirmed else "not paid"

        self.tool = FunctionTool(pay)
        self.tool.custom_metadata = {"turnwatch_class": "mutating"}


async def test_a_tool_that_asks_itself_runs_again_once_confirmed(
    rt: Runtime, sink: MemorySink
) -> None:
    t = AsksItself()
    # (The model is told the tool asked: a text, then its "done" once the tool ran again.)
    runner, app = wrapped(rt, [t.tool], model(says(call("p1", "pay", amount=3)), OK))
    sid = await new_session(runner)
    (request,) = asked(await consume(app.run_async(user_id="u", session_id=sid, new_message=HI)))
    assert rt.session(sid).live is not None  # waits on the confirmation
    await reply(app, sid, request)
    assert t.ran == [None, True]
    # Its first run (until it asked) under the model's id; the confirmed one under the request's.
    assert names.TOOL_FINISHED in kinds(sink, "p1")
    assert names.PERMISSION_GRANTED in kinds(sink, request.id)
    assert names.TOOL_FINISHED in kinds(sink, request.id)
    assert responses(await history(runner, sid), "p1")[-1] == {"result": "paid"}
    assert rt.session(sid).live is None
    assert check_invariants(list(sink)) == []


async def test_a_tool_that_asks_itself_is_told_no_after_the_stop(
    rt: Runtime, sink: MemorySink
) -> None:
    t = AsksItself()
    # (The model is told the tool asked: a text, then its "done" once the tool ran again.)
    runner, app = wrapped(rt, [t.tool], model(says(call("p1", "pay", amount=3)), OK))
    sid = await new_session(runner)
    (request,) = asked(await consume(app.run_async(user_id="u", session_id=sid, new_message=HI)))
    await rt.abort(sid)
    await reply(app, sid, request)
    assert t.ran == [None, False]  # run again by ADK, told the user's "yes" came too late
    assert names.PERMISSION_LATE in kinds(sink, request.id)
    assert responses(await history(runner, sid), "p1")[-1] == {"result": "not paid"}
    assert check_invariants(list(sink)) == []


async def test_a_request_seen_twice_is_asked_once(rt: Runtime, sink: MemorySink) -> None:
    """An event read again (a client that replays what it saw): the request is one prompt."""
    turn = rt.start_turn("s")
    held = {"id": "w1", "name": "write", "args": {"text": "a"}}
    ask = types.FunctionCall(id="adk-1", name=CONFIRM, args={"originalFunctionCall": held})
    event = Event(
        author="a", content=types.Content(role="model", parts=[types.Part(function_call=ask)])
    )
    dispatch = dispatcher(rt.host, "test")
    confirmations.ask(turn, dispatch, event)
    confirmations.ask(turn, dispatch, event)
    assert list(turn.calls) == ["adk-1"]
    assert [e.kind for e in sink if e.call == "adk-1"].count(names.PERMISSION_REQUESTED) == 1
    await rt.abort("s")
    assert not kept_of(dispatch, "s")
