"""LangGraph, native and wrapped, side by side: a graph of a model node and a ``ToolNode``, the
model scripted (langchain-core's fake chat model), the tools real (a TERM-ignoring process tree,
a slow read, a write), the checkpoint LangGraph's own (``InMemorySaver`` and the SQLite one).

Native, a cancel of the run leaves the tree running, the checkpoint with unanswered tool calls,
and a resume that runs the write again. Wrapped, ``rt.abort()`` returns once each call is released
under its policy, every call has its answer in the checkpoint, and a resume runs nothing again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from tests.conftest import until
from tests.integrations.lg_graphs import Scripted, agent_graph, parent_of
from tests.integrations.lg_tools import (
    CALLS,
    Tools,
    classed,
    unanswered,
)
from tests.integrations.procs import end_marked, marked_alive
from turnwatch import names
from turnwatch.integrations.langgraph import StoppableGraph, ToolClassError, tool_node
from turnwatch.runtime import MemorySink, Receipt, Runtime
from turnwatch.testing import check_invariants


@pytest.fixture
def rt(runtime: Runtime) -> Runtime:
    return runtime


async def test_native_a_cancelled_run_leaves_the_tree_the_calls_unanswered_and_reruns_the_write(
    checkpointer: Any,
) -> None:
    t = Tools(native=True)
    app = t.graph(ToolNode(t.all), checkpointer)
    cfg = {"configurable": {"thread_id": "n"}}
    run = asyncio.ensure_future(app.ainvoke({"messages": [("user", "go")]}, cfg))
    try:
        await until(lambda: len(marked_alive("native")) >= 3 and t.started, what="the tools")
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        assert len(marked_alive("native")) >= 3  # the tree runs on
        state = await app.aget_state(cfg)
        assert unanswered(state.values["messages"]) == {"r1", "p1", "w1"}
        assert state.next == ("tools",)
        _end(t)  # (the resume would wait on it)
        resumed = asyncio.ensure_future(app.ainvoke(None, cfg))
        await until(
            lambda: len(t.started) == 2 and len(t.spawned) == 2,
            what="the resume to run the write and the command again",
        )
        assert t.started == ["a", "a"]  # the write began twice
        resumed.cancel()
        await asyncio.gather(resumed, return_exceptions=True)
    finally:
        _end(t)


def _end(t: Tools) -> None:
    end_marked("native", t.spawned)


async def test_wrapped_every_call_is_answered_nothing_runs_on_and_a_resume_reruns_nothing(
    rt: Runtime, sink: MemorySink, checkpointer: Any
) -> None:
    t = Tools()
    app = StoppableGraph(t.graph(tool_node(t.all, rt), checkpointer), rt)
    cfg = {"configurable": {"thread_id": "w"}}
    run = asyncio.ensure_future(app.ainvoke({"messages": [("user", "go")]}, cfg, session="s"))
    await until(lambda: len(marked_alive("s")) >= 3, what="the tree to start")
    assert await rt.abort("s") is Receipt.ACCEPTED
    assert marked_alive("s") == []  # abort() returned: nothing of the process call outlived it
    assert t.written == ["a"]  # the write was awaited to its end
    final = await asyncio.wait_for(run, 10)
    assert t.model_calls == 1  # the model was not asked again after the stop
    messages = final["messages"]
    assert unanswered(messages) == set()  # a valid history
    said = {
        m.tool_call_id: (m.status, str(m.content)) for m in messages if isinstance(m, ToolMessage)
    }
    assert said["w1"] == ("success", "written")  # completed after the stop: its real result
    assert said["r1"][0] == "error"
    assert "discarded" in said["r1"][1]
    assert "ended" in said["p1"][1]
    state = await app.graph.aget_state(cfg)
    assert unanswered(state.values["messages"]) == set()  # so is the checkpoint's
    # A resume asks the model, and runs no call again.
    resumed = await app.ainvoke(None, cfg, session="s")
    assert t.started == t.written == ["a"]
    assert isinstance(resumed["messages"][-1], AIMessage)
    ended = {
        str(e.call): e.attrs.get("outcome")
        for e in sink
        if e.kind == names.TOOL_FINISHED and e.call is not None
    }
    assert ended["w1"] == "completed_after_stop"
    assert ended["p1"] == "aborted"
    assert check_invariants(list(sink)) == []


async def test_a_stop_while_the_model_runs_ends_the_run_with_a_valid_history(
    rt: Runtime, sink: MemorySink
) -> None:
    """Nothing in flight, the model mid-answer (it never answers): the stop cancels the run at
    once, and the checkpoint is the last step's."""
    thinking = asyncio.Event()

    class Slow(Scripted):
        async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
            thinking.set()
            await asyncio.Event().wait()  # an answer that never comes

    model = Slow(messages=iter([AIMessage(content="late")]))

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    g.add_edge("agent", END)
    app = StoppableGraph(g.compile(checkpointer=InMemorySaver()), rt)
    cfg = {"configurable": {"thread_id": "m"}}
    run = asyncio.ensure_future(app.ainvoke({"messages": [("user", "go")]}, cfg, session="m"))
    await asyncio.wait_for(thinking.wait(), 10)
    assert await rt.abort("m") is Receipt.ACCEPTED
    final = await asyncio.wait_for(run, 5)  # ended at once: the model's step was cancelled
    assert [type(m).__name__ for m in final["messages"]] == ["HumanMessage"]
    assert [e.attrs.get("outcome") for e in sink if e.kind == names.TURN_SETTLED] == ["aborted"]


def test_an_unknown_class_is_refused_when_the_node_is_built(rt: Runtime) -> None:
    @classed("sometimes")
    @tool
    async def odd() -> str:
        """odd"""
        return ""

    with pytest.raises(ToolClassError, match="sometimes"):
        tool_node([odd], rt)
    from turnwatch.integrations.langgraph_middleware import TurnwatchMiddleware

    with pytest.raises(ToolClassError, match="sometimes"):  # create_agent's middleware too
        TurnwatchMiddleware(rt, [odd])

    @classed("process")
    @tool
    def sync_sh() -> str:
        """a sync process tool: its commands could not be contained"""
        return ""

    with pytest.raises(ToolClassError, match="must be async"):
        tool_node([sync_sh], rt)


async def test_a_stop_between_the_models_calls_and_their_step_answers_them_not_run(
    rt: Runtime, sink: MemorySink, checkpointer: Any
) -> None:
    """The stop lands after the model asked for tools and before their step began (a node in
    between: a guard, a router). Nothing is in flight, so the run is cancelled at once; the
    checkpoint then held an AIMessage with unanswered calls, which each get "not run"."""
    t = Tools()
    hold = asyncio.Event()
    model = Scripted(messages=iter([AIMessage(content="", tool_calls=CALLS), AIMessage("ok")]))

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    async def guard(state: MessagesState) -> dict[str, Any]:
        hold.set()
        await asyncio.sleep(30)
        return {}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("guard", guard)
    g.add_node("tools", tool_node(t.all, rt))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", lambda s: "guard" if s["messages"][-1].tool_calls else END)
    g.add_edge("guard", "tools")
    g.add_edge("tools", "agent")
    app = StoppableGraph(g.compile(checkpointer=checkpointer), rt)
    cfg = {"configurable": {"thread_id": "g"}}
    run = asyncio.ensure_future(app.ainvoke({"messages": [("user", "go")]}, cfg, session="g"))
    await asyncio.wait_for(hold.wait(), 10)
    assert await rt.abort("g") is Receipt.ACCEPTED
    final = await asyncio.wait_for(run, 10)
    assert unanswered(final["messages"]) == set()
    said = [str(m.content) for m in final["messages"] if isinstance(m, ToolMessage)]
    assert len(said) == 3
    assert all(w.startswith("Not run") for w in said)
    assert t.started == []  # no call ran
    state = await app.graph.aget_state(cfg)
    assert state.next == ("agent",)  # as after a tools step: a resume asks the model


# --- create_agent, through its middleware ---


async def test_the_stop_joins_the_trace_the_run_was_called_in(tmp_path: Path) -> None:
    """The span the graph is run in (the application's own, or an instrumentation's) is the
    stop's parent: one trace from the run to its stop, turnwatch's call span in it too. The
    spans are built as in production, in the ledger's writer thread (no context of the run's)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.conftest import GRACE
    from turnwatch.runtime import FanOut, LocalHost
    from turnwatch.tracing.ledger import Ledger
    from turnwatch.tracing.pipeline import Telemetry
    from turnwatch.tracing.spans import SpanBuilder

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    telemetry = Telemetry(ledger=ledger, spans=SpanBuilder(provider.get_tracer("turnwatch")))
    seen = MemorySink()
    rt = Runtime(LocalHost(), grace_s=GRACE, sink=FanOut(telemetry, seen))
    t = Tools()
    app = StoppableGraph(t.graph(tool_node(t.all[:1], rt), InMemorySaver()), rt)
    cfg = {"configurable": {"thread_id": "tr"}}
    with provider.get_tracer("app").start_as_current_span("handle request") as outer:
        run = asyncio.ensure_future(app.ainvoke({"messages": [("user", "go")]}, cfg, session="tr"))
        await seen.wait_for(names.TOOL_STARTED)
        await rt.abort("tr")
        await asyncio.wait_for(run, 10)
    ledger.flush(timeout=10)
    ledger.close()
    finished = exporter.get_finished_spans()
    (stop,) = [sp for sp in finished if sp.name == names.SPAN_STOP]
    assert stop.context.trace_id == outer.get_span_context().trace_id
    assert stop.parent is not None
    assert stop.parent.span_id == outer.get_span_context().span_id
    ours = [sp for sp in finished if sp.name == "execute_tool look"]
    assert [sp.context.trace_id for sp in ours] == [outer.get_span_context().trace_id]
    keys = {k for sp in finished for k in (sp.attributes or {})}
    assert not [k for k in keys if any(w in k for w in ("argument", "result", "input", "output"))]


@pytest.mark.parametrize("shape", ["a node", "called by a node"])
async def test_a_stop_reaches_a_subgraphs_tools_and_ends_the_run_there(
    rt: Runtime, sink: MemorySink, checkpointer: Any, shape: str
) -> None:
    """langgraph #5682: a subgraph (its own model and ``tool_node``), a node of the parent or
    run by one. The stop's walk reaches its calls, and the run ends after the subgraph's tools
    step, before the subgraph's model is asked again; a resume reruns nothing."""
    t = Tools()
    sub = t.graph(tool_node(t.all, rt), None)
    app = StoppableGraph(parent_of(sub, checkpointer, called=shape != "a node"), rt)
    cfg = {"configurable": {"thread_id": "sg"}}
    run = asyncio.ensure_future(app.ainvoke({"messages": [("user", "go")]}, cfg, session="sg"))
    await until(lambda: len(marked_alive("sg")) >= 3, what="the tree to start")
    assert await rt.abort("sg") is Receipt.ACCEPTED
    assert marked_alive("sg") == []
    assert t.written == ["a"]
    await asyncio.wait_for(run, 10)
    assert t.model_calls == 1  # the subgraph's model was not asked again after the stop
    await app.ainvoke(None, cfg, session="sg")  # the resume reruns no call
    assert t.started == t.written == ["a"]
    assert check_invariants(list(sink)) == []


async def test_a_drain_the_caller_asked_for_is_the_frameworks_stop(
    rt: Runtime, sink: MemorySink, checkpointer: Any
) -> None:
    """The caller's own ``RunControl`` drained (its shutdown): the run ends at the step's end,
    resumable, ``GraphDrained`` raised as LangGraph raises it, and the turn is stopped as the
    framework's stop (source ``framework``), never reported completed."""
    from langgraph.errors import GraphDrained
    from langgraph.runtime import RunControl

    t = Tools()
    app = StoppableGraph(t.graph(tool_node(t.all[2:], rt), checkpointer), rt)  # the write
    control = RunControl()
    cfg = {"configurable": {"thread_id": "dr"}}
    run = asyncio.ensure_future(
        app.ainvoke({"messages": [("user", "go")]}, cfg, session="dr", control=control)
    )
    await until(lambda: t.started, what="the write to start")
    control.request_drain("shutdown")
    with pytest.raises(GraphDrained):
        await asyncio.wait_for(run, 10)
    assert t.written == ["a"]  # the step under way ended
    assert t.model_calls == 1  # none began after it
    rpc = [e.attrs.get("source") for e in sink if e.kind == names.ABORT_RPC_RECEIVED]
    assert rpc == ["framework"]
    assert [e.attrs.get("outcome") for e in sink if e.kind == names.TURN_SETTLED] == ["aborted"]
    assert check_invariants(list(sink)) == []


async def test_a_thread_a_native_cancel_left_is_answered_before_a_wrapped_run_goes_on(
    rt: Runtime, sink: MemorySink, checkpointer: Any
) -> None:
    """A run that ended in its tools step without their answers (cancelled natively, or its
    process killed) leaves calls LangGraph would run again on a resume. The wrapped app,
    resuming that thread, answers them first ("not known": they may have run) and runs none."""
    from turnwatch.integrations.langgraph import LEFT

    native = Tools(native=True)
    app = native.graph(ToolNode(native.all), checkpointer)
    cfg = {"configurable": {"thread_id": "left"}}
    run = asyncio.ensure_future(app.ainvoke({"messages": [("user", "go")]}, cfg))
    try:
        await until(lambda: native.started and marked_alive("native"), what="the tools")
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
    finally:
        _end(native)
    assert unanswered((await app.aget_state(cfg)).values["messages"]) == {"r1", "p1", "w1"}

    t = Tools()  # the app, restarted with the wrapper, on the same thread
    model = Scripted(messages=iter([AIMessage(content="done")]))
    wrapped = StoppableGraph(agent_graph(tool_node(t.all, rt), model, checkpointer), rt)
    final = await wrapped.ainvoke(None, cfg, session="left")
    assert t.started == []  # no call of the dead run ran again
    assert unanswered(final["messages"]) == set()
    said = {m.tool_call_id: m.content for m in final["messages"] if isinstance(m, ToolMessage)}
    assert said == {"r1": LEFT, "p1": LEFT, "w1": LEFT}
    assert isinstance(final["messages"][-1], AIMessage)  # the model, told, answered


async def test_an_apps_own_tool_node_wrapped_keeps_its_settings_and_its_hook_inside_the_call(
    rt: Runtime, sink: MemorySink, checkpointer: Any
) -> None:
    """``wrap_tool_node``: the application's ``ToolNode`` (its name, error handling, its own
    ``awrap_tool_call``) stops the ADR's way; its hook runs inside each turnwatch call."""
    from turnwatch.integrations.langgraph_nodes import wrap_tool_node

    t = Tools()
    hooked: list[str] = []

    async def audit(request: Any, execute: Any) -> Any:
        hooked.append(request.tool_call["id"])
        return await execute(request)

    theirs = ToolNode(t.all, name="tools", handle_tool_errors=False, awrap_tool_call=audit)
    node = wrap_tool_node(theirs, rt)
    assert node.tools_by_name.keys() == theirs.tools_by_name.keys()
    assert node._handle_tool_errors is False  # noqa: SLF001 - the setting kept
    app = StoppableGraph(t.graph(node, checkpointer), rt)
    cfg = {"configurable": {"thread_id": "wn"}}
    run = asyncio.ensure_future(app.ainvoke({"messages": [("user", "go")]}, cfg, session="wn"))
    await until(lambda: len(marked_alive("wn")) >= 3 and t.started, what="the tools")
    assert await rt.abort("wn") is Receipt.ACCEPTED
    assert marked_alive("wn") == []  # the process call ended within its grace window
    assert t.written == ["a"]  # the write awaited
    final = await asyncio.wait_for(run, 10)
    assert unanswered(final["messages"]) == set()
    assert sorted(hooked) == ["p1", "r1", "w1"]  # their hook ran, inside each call
    assert t.model_calls == 1
    started = {e.call for e in sink if e.kind == names.TOOL_STARTED}
    assert started == {"r1", "p1", "w1"}
    assert check_invariants(list(sink)) == []


def test_wrap_tool_node_checks_the_classes_when_built(rt: Runtime) -> None:
    from turnwatch.integrations.langgraph_nodes import wrap_tool_node

    @tool
    async def odd() -> str:
        """a tool of no known class"""
        return ""

    odd.metadata = {"turnwatch_class": "teleport"}
    with pytest.raises(ToolClassError, match="teleport"):
        wrap_tool_node(ToolNode([odd]), rt)
