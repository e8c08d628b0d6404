"""Approvals in a LangGraph agent (``create_agent`` with ``HumanInTheLoopMiddleware``), native and
wrapped: the run paused for approval is a turn waiting on pending permissions; a stop cancels
them, and an approval after it is refused, so the write never runs."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from tests.integrations.lg_graphs import Scripted, agent_graph
from tests.integrations.lg_tools import classed, unanswered
from turnwatch import names
from turnwatch.integrations import langgraph
from turnwatch.integrations.langgraph import StoppableGraph, stopped_words, tool_node
from turnwatch.integrations.langgraph_approvals import STOPPED
from turnwatch.integrations.langgraph_middleware import TurnwatchMiddleware
from turnwatch.runtime import LocalHost, MemorySink, Outcome, Receipt, Runtime, Turn
from turnwatch.testing import check_invariants
from turnwatch.tracing.arc import arc_of

CALLS = [
    {"id": "w1", "name": "write", "args": {"text": "a"}},
    {"id": "w2", "name": "write", "args": {"text": "b"}},
]
APPROVE = {"type": "approve"}
CFG: Any = {"configurable": {"thread_id": "t"}}


class Writes:
    """A mutating tool behind an approval, and what it wrote."""

    def __init__(self) -> None:
        self.written: list[str] = []

        @classed("mutating")
        @tool
        async def write(text: str) -> str:
            """a write that needs the user's approval"""
            await asyncio.sleep(0.05)
            self.written.append(text)
            return "written"

        self.write = write

    def agent(self, rt: Runtime | None, *, mode: str = "batched", calls: Any = CALLS) -> Any:
        script = [AIMessage(content="", tool_calls=calls)] + [AIMessage(content="done")] * 3
        hitl = HumanInTheLoopMiddleware(interrupt_on={"write": True}, interrupt_mode=mode)  # type: ignore[arg-type]
        # The approval first (the outermost): a call is one once it may run.
        middleware: list[Any] = [hitl]
        if rt is not None:
            middleware.append(TurnwatchMiddleware(rt, [self.write]))
        return create_agent(
            model=Scripted(messages=iter(script)),
            tools=[self.write],
            middleware=middleware,
            checkpointer=InMemorySaver(),
        )


def of(sink: MemorySink, kind: str) -> list[str | None]:
    return [e.call for e in sink if e.kind == kind]


async def paused(
    rt: Runtime, session: str, **agent: Any
) -> tuple[Writes, StoppableGraph, dict[str, Any]]:
    """A wrapped agent run to its approvals: the tool, the graph, the state it paused in."""
    w = Writes()
    app = StoppableGraph(w.agent(rt, **agent), rt)
    state = await app.ainvoke({"messages": [("user", "go")]}, CFG, session=session)
    return w, app, state


async def test_native_an_approval_after_the_stop_still_runs_the_write() -> None:
    """Natively a run paused for approval has nothing to stop: the user's Stop changes nothing,
    and an approval given after it runs the write."""
    w = Writes()
    agent = w.agent(None, calls=CALLS[:1])
    paused = await agent.ainvoke({"messages": [("user", "go")]}, CFG)
    assert paused["__interrupt__"]
    await agent.ainvoke(Command(resume={"decisions": [APPROVE]}), CFG)
    assert w.written == ["a"]


async def test_wrapped_a_paused_run_is_a_turn_waiting_on_its_permissions(
    runtime: Runtime, sink: MemorySink
) -> None:
    w, app, state = await paused(runtime, "s")
    assert state["__interrupt__"]  # as LangGraph's own ainvoke says it
    assert of(sink, names.PERMISSION_REQUESTED) == ["w1", "w2"]
    assert of(sink, names.TURN_SETTLED) == []  # a permission can still be granted
    assert arc_of(list(sink)).states[-1] == "waiting"
    decisions = [APPROVE, {"type": "reject", "message": "not that one"}]
    final = await app.ainvoke(Command(resume={"decisions": decisions}), CFG, session="s")
    assert w.written == ["a"]
    assert of(sink, names.PERMISSION_GRANTED) == ["w1"]
    assert of(sink, names.PERMISSION_DENIED) == ["w2"]
    assert of(sink, names.TOOL_STARTED) == ["w1"]  # the rejected call never started
    assert of(sink, names.TURN_STARTED) == [None]  # one turn, from the prompt to its end
    assert [e.attrs.get("outcome") for e in sink if e.kind == names.TURN_SETTLED] == ["completed"]
    assert unanswered(final["messages"]) == set()
    assert check_invariants(list(sink)) == []


async def test_wrapped_a_stop_while_it_waits_cancels_and_a_late_approval_is_refused(
    runtime: Runtime, sink: MemorySink
) -> None:
    w, app, _ = await paused(runtime, "s")
    assert await runtime.abort("s") is Receipt.ACCEPTED
    assert of(sink, names.PERMISSION_CANCELLED) == ["w1", "w2"]
    assert [e.attrs.get("outcome") for e in sink if e.kind == names.TURN_SETTLED] == ["aborted"]
    final = await app.ainvoke(Command(resume={"decisions": [APPROVE] * 2}), CFG, session="s")
    assert of(sink, names.PERMISSION_LATE) == ["w1", "w2"]
    assert w.written == []  # approved after the stop: never run
    said = {m.tool_call_id: str(m.content) for m in final["messages"] if isinstance(m, ToolMessage)}
    assert set(said) == {"w1", "w2"}
    assert all(STOPPED in text for text in said.values())
    assert unanswered(final["messages"]) == set()  # a valid history
    assert check_invariants(list(sink)) == []


async def test_wrapped_per_call_approvals_keyed_by_interrupt(
    runtime: Runtime, sink: MemorySink
) -> None:
    w, app, state = await paused(runtime, "p", mode="per_call")
    ids = {i.value["tool_call_id"]: i.id for i in state["__interrupt__"]}
    assert sorted(ids) == ["w1", "w2"]
    assert set(of(sink, names.PERMISSION_REQUESTED)) == {"w1", "w2"}
    answer = {ids["w1"]: APPROVE, ids["w2"]: {"type": "reject"}}
    await app.ainvoke(Command(resume=answer), CFG, session="p")
    assert w.written == ["a"]
    assert of(sink, names.PERMISSION_DENIED) == ["w2"]
    assert check_invariants(list(sink)) == []


async def test_wrapped_a_new_message_while_approvals_wait_stops_their_turn(
    runtime: Runtime, sink: MemorySink
) -> None:
    """A new prompt instead of an answer abandons the approvals: their turn is stopped (the
    framework's stop), so none can be granted later, and the new prompt is a turn of its own."""
    w, app, _ = await paused(runtime, "n", calls=CALLS[:1])
    final = await app.ainvoke({"messages": [("user", "something else")]}, CFG, session="n")
    assert of(sink, names.PERMISSION_CANCELLED) == ["w1"]
    rpc = [e.attrs.get("source") for e in sink if e.kind == names.ABORT_RPC_RECEIVED]
    assert rpc == ["framework"]
    assert w.written == []
    assert unanswered(final["messages"]) == set()  # the abandoned call answered "not run"
    assert len([e for e in sink if e.kind == names.TURN_STARTED]) == 2
    assert check_invariants(list(sink)) == []


# --- a tool that asks its user itself (interrupt() in the tool) ---


class Deploys:
    """A tool that asks its user before it acts (``interrupt()`` in its body): mutating unless
    said (a read-only one runs in its caller's own task, a mutating one in a task of its own)."""

    def __init__(self, cls: str = "mutating") -> None:
        self.done: list[object] = []

        @classed(cls)
        @tool
        async def deploy(env: str) -> str:
            """deploys, once its user says so"""
            answer = interrupt({"question": f"deploy to {env}?"})
            self.done.append(answer)
            return "deployed"

        self.tool = deploy

    def graph(self, rt: Runtime | None) -> Any:
        call = {"id": "d1", "name": "deploy", "args": {"env": "prod"}}
        script = [AIMessage(content="", tool_calls=[call])] + [AIMessage(content="done")] * 2
        node = tool_node([self.tool], rt) if rt is not None else ToolNode([self.tool])
        return agent_graph(node, Scripted(messages=iter(script)), InMemorySaver())


async def test_native_a_tools_own_question_answered_after_the_stop_still_deploys() -> None:
    d = Deploys()
    app = d.graph(None)
    paused = await app.ainvoke({"messages": [("user", "go")]}, CFG)
    assert paused["__interrupt__"]
    await app.ainvoke(Command(resume="yes"), CFG)  # after the user's Stop, natively nothing
    assert d.done == ["yes"]


@pytest.mark.parametrize("cls", ["mutating", "read_only"])
async def test_wrapped_a_tools_own_question_is_a_permission_of_the_waiting_turn(
    runtime: Runtime, sink: MemorySink, cls: str
) -> None:
    d = Deploys(cls)
    app = StoppableGraph(d.graph(runtime), runtime)
    paused = await app.ainvoke({"messages": [("user", "go")]}, CFG, session="q")
    assert paused["__interrupt__"]
    assert of(sink, names.PERMISSION_REQUESTED) == ["d1:resumed"]  # its going on, asked
    assert of(sink, names.TURN_SETTLED) == []
    await app.ainvoke(Command(resume="yes"), CFG, session="q")
    assert d.done == ["yes"]
    assert of(sink, names.PERMISSION_GRANTED) == ["d1:resumed"]
    assert [e.attrs.get("outcome") for e in sink if e.kind == names.TOOL_FINISHED] == [
        "completed",  # its run until it asked
        "completed",  # its run once answered
    ]
    assert len(of(sink, names.TURN_STARTED)) == 1
    assert check_invariants(list(sink)) == []


@pytest.mark.parametrize("cls", ["mutating", "read_only"])
async def test_wrapped_a_tools_own_question_answered_after_the_stop_never_goes_on(
    runtime: Runtime, sink: MemorySink, cls: str
) -> None:
    d = Deploys(cls)
    app = StoppableGraph(d.graph(runtime), runtime)
    await app.ainvoke({"messages": [("user", "go")]}, CFG, session="q")
    assert await runtime.abort("q") is Receipt.ACCEPTED
    assert of(sink, names.PERMISSION_CANCELLED) == ["d1:resumed"]
    final = await app.ainvoke(Command(resume="yes"), CFG, session="q")
    assert of(sink, names.PERMISSION_LATE) == ["d1:resumed"]
    assert d.done == []  # answered after the stop: it never deployed
    said = [str(m.content) for m in final["messages"] if isinstance(m, ToolMessage)]
    assert said == [stopped_words(Outcome.REFUSED)]
    assert unanswered(final["messages"]) == set()
    assert check_invariants(list(sink)) == []


# --- a stop while approvals wait, and nobody comes back ---


def turns_alive() -> int:
    gc.collect()
    return sum(isinstance(o, Turn) for o in gc.get_objects())


async def test_wrapped_runs_stopped_at_their_approvals_leave_no_turn_behind(
    sink: MemorySink,
) -> None:
    """Stopped while their approvals wait, and never resumed: the graph kept each one's turn
    (every call, every result) and a slot per prompt, for its life, after the runtime let the
    session go. What a late resume needs is kept (the calls asked about), bounded; the turn
    and its slots are let go."""
    runtime = Runtime(LocalHost(), sink=sink, retain_settled_s=0.0)
    w = Writes()
    hitl = HumanInTheLoopMiddleware(interrupt_on={"write": True})
    sessions = 6
    script = [AIMessage(content="", tool_calls=CALLS[:1])] * sessions + [AIMessage(content="ok")]
    app = StoppableGraph(
        create_agent(
            model=Scripted(messages=iter(script)),
            tools=[w.write],
            middleware=[hitl, TurnwatchMiddleware(runtime, [w.write])],
            checkpointer=InMemorySaver(),
        ),
        runtime,
    )
    own = StoppableGraph(Deploys().graph(runtime), runtime)  # a tool's own question: renamed ids

    async def stopped(graph: StoppableGraph, session: str) -> None:
        cfg = {"configurable": {"thread_id": session}}
        assert (await graph.ainvoke({"messages": [("user", "go")]}, cfg, session=session))[
            "__interrupt__"
        ]
        assert await runtime.abort(session) is Receipt.ACCEPTED

    for i in range(2):
        await stopped(app, f"s{i}")
    await stopped(own, "q0")
    two = turns_alive()
    for i in range(2, sessions):
        await stopped(app, f"s{i}")
    assert turns_alive() <= two  # before: one more per session
    for graph in (app, own):
        assert graph.dispatch.slots == {}
        assert graph.dispatch.renamed == {}
    # And a late approval is still refused, from what was kept.
    final = await app.ainvoke(
        Command(resume={"decisions": [APPROVE]}),
        {"configurable": {"thread_id": "s0"}},
        session="s0",
    )
    assert w.written == []
    assert unanswered(final["messages"]) == set()
    assert check_invariants(list(sink)) == []


async def test_what_is_kept_for_a_late_resume_is_bounded(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(langgraph, "MAX_STOPPED_WAITS", 2)
    w = Writes()
    script = [AIMessage(content="", tool_calls=CALLS[:1])] * 4
    app = StoppableGraph(
        create_agent(
            model=Scripted(messages=iter(script)),
            tools=[w.write],
            middleware=[
                HumanInTheLoopMiddleware(interrupt_on={"write": True}),
                TurnwatchMiddleware(runtime, [w.write]),
            ],
            checkpointer=InMemorySaver(),
        ),
        runtime,
    )
    for i in range(4):
        cfg = {"configurable": {"thread_id": f"b{i}"}}
        await app.ainvoke({"messages": [("user", "go")]}, cfg, session=f"b{i}")
        await runtime.abort(f"b{i}")
    assert list(app.stopped_waits) == ["b2", "b3"]  # the oldest let go first


async def test_a_new_message_instead_of_a_tools_answer_leaves_nothing_behind(
    runtime: Runtime, sink: MemorySink
) -> None:
    """A tool's own question abandoned for a new message: its turn is stopped, and the id its
    resumption would have run under goes with its slot (it stayed for the graph's life)."""
    d = Deploys()
    app = StoppableGraph(d.graph(runtime), runtime)
    assert (await app.ainvoke({"messages": [("user", "go")]}, CFG, session="q"))["__interrupt__"]
    assert app.dispatch.renamed  # the resumption's own id, while it waits
    await app.ainvoke({"messages": [("user", "something else")]}, CFG, session="q")
    assert d.done == []
    assert app.dispatch.renamed == {}
    assert app.dispatch.slots == {}
    assert check_invariants(list(sink)) == []
