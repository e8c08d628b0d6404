"""ADK's tool confirmations in a wrapped run: the turn's pending permissions.

A tool that requires confirmation (``FunctionTool(…, require_confirmation=True)``, or one that
calls ``tool_context.request_confirmation()`` itself) ends ADK's run with an
``adk_request_confirmation`` call for the user to answer in the next run. Until it is answered
a permission can still be approved: the turn does not settle (invariant 1), and a stop while it
waits closes the prompt, so a confirmation sent after the stop never runs the tool.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.events import Event
from google.adk.runners import InMemoryRunner
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from tests.integrations.adk_parts import (
    CONFIRM,
    HI,
    OK,
    Writes,
    ask_to_write,
    asked,
    call,
    confirm,
    consume,
    history,
    kept,
    kept_of,
    kinds,
    model,
    new_session,
    reply,
    responses,
    says,
    wrapped,
)
from turnwatch import names
from turnwatch.integrations import google_adk_confirmations as confirmations
from turnwatch.integrations.google_adk import StoppableRunner, TurnwatchPlugin
from turnwatch.integrations.wrappers import dispatcher
from turnwatch.runtime import MemorySink, Receipt, Runtime
from turnwatch.runtime.model import Phase
from turnwatch.testing import check_invariants


@pytest.fixture
def rt(runtime: Runtime) -> Runtime:
    return runtime


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
