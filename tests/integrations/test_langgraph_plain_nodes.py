"""A ``ToolNode`` the application built itself (``ToolNode(tools)``, ``create_react_agent``'s),
in a :class:`StoppableGraph`, in the graph or any subgraph of it: its calls are turnwatch calls,
stopped the ADR's way. Left as LangGraph built it, the stop found no call, reported the turn
settled at once, and cancelled the run natively: the tool's process tree ran on, a write was cut
off half-done, and its call was left unanswered in the history."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode

from tests.conftest import GRACE, until
from tests.integrations.lg_graphs import Scripted, agent_graph, parent_of
from tests.integrations.lg_tools import CALLS, Tools, unanswered
from tests.integrations.procs import marked_alive
from tests.integrations.verdicts import outcomes
from turnwatch import names
from turnwatch.integrations.langgraph import StoppableGraph, ToolClassError, tool_node
from turnwatch.runtime import LocalHost, MemorySink, Receipt, Runtime
from turnwatch.testing import check_invariants


@pytest.fixture
def rt(runtime: Runtime) -> Runtime:
    return runtime


async def stopped_mid_tools(rt: Runtime, app: StoppableGraph, t: Tools, session: str) -> Any:
    """Run ``app``, stop it once its three calls run: what its run returned."""
    cfg = {"configurable": {"thread_id": session}}
    run = asyncio.ensure_future(app.ainvoke({"messages": [("user", "go")]}, cfg, session=session))
    await until(lambda: len(marked_alive(session)) >= 3 and t.started, what="the tools")
    assert await rt.abort(session) is Receipt.ACCEPTED
    assert marked_alive(session) == []  # nothing of the process call outlived abort()
    assert t.written == ["a"]  # the write was awaited to its end
    return await asyncio.wait_for(run, 10)


@pytest.mark.parametrize("where", ["the graph", "a subgraph", "a subgraph a node runs"])
async def test_a_plain_tool_node_is_stopped_the_adrs_way(
    rt: Runtime, sink: MemorySink, where: str
) -> None:
    t = Tools()
    if where == "the graph":
        graph = t.graph(ToolNode(t.all), InMemorySaver())
    else:
        sub = t.graph(ToolNode(t.all), None)
        graph = parent_of(sub, InMemorySaver(), called=where != "a subgraph")
    final = await stopped_mid_tools(rt, StoppableGraph(graph, rt), t, "s")
    assert unanswered(final["messages"]) == set()
    assert t.model_calls == 1  # the model was not asked again after the stop
    assert outcomes(sink) == {"r1": "discarded", "p1": "aborted", "w1": "completed_after_stop"}
    assert check_invariants(list(sink)) == []


async def test_create_react_agent_is_stopped_the_adrs_way(rt: Runtime, sink: MemorySink) -> None:
    from langgraph.prebuilt import create_react_agent

    t = Tools()
    model = Scripted(
        messages=iter([AIMessage(content="", tool_calls=CALLS), AIMessage(content="done")])
    )
    with pytest.warns(DeprecationWarning, match="create_agent"):  # LangGraph moved it
        agent = create_react_agent(model, t.all, checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "ra"}}
    app = StoppableGraph(agent, rt)
    run = asyncio.ensure_future(app.ainvoke({"messages": [("user", "go")]}, cfg, session="ra"))
    await until(lambda: len(marked_alive("ra")) >= 3 and t.started, what="the tools")
    assert await rt.abort("ra") is Receipt.ACCEPTED
    assert marked_alive("ra") == []
    assert t.written == ["a"]
    final = await asyncio.wait_for(run, 10)
    assert unanswered(final["messages"]) == set()
    assert outcomes(sink) == {"r1": "discarded", "p1": "aborted", "w1": "completed_after_stop"}


async def test_a_plain_tool_node_keeps_its_own_hook_inside_the_call(
    rt: Runtime, sink: MemorySink
) -> None:
    t = Tools()
    hooked: list[str] = []

    async def audit(request: Any, execute: Any) -> Any:
        hooked.append(request.tool_call["id"])
        return await execute(request)

    node = ToolNode(t.all, awrap_tool_call=audit)
    await stopped_mid_tools(rt, StoppableGraph(t.graph(node, InMemorySaver()), rt), t, "h")
    assert sorted(hooked) == ["p1", "r1", "w1"]
    assert {e.call for e in sink if e.kind == names.TOOL_STARTED} == {"r1", "p1", "w1"}


async def test_a_plain_tool_node_outside_a_stoppable_graph_runs_as_langgraph_runs_it(
    rt: Runtime, sink: MemorySink
) -> None:
    """The node is the application's: wrapped in place, it still runs LangGraph's way in a run
    that is not a turn (the same graph invoked directly)."""

    @tool
    async def add(a: int, b: int) -> int:
        """add"""
        return a + b

    model = Scripted(
        messages=iter(
            [
                AIMessage(
                    content="", tool_calls=[{"id": "a1", "name": "add", "args": {"a": 1, "b": 2}}]
                ),
                AIMessage(content="done"),
            ]
        )
    )
    graph = agent_graph(ToolNode([add]), model)
    StoppableGraph(graph, rt)
    final = await graph.ainvoke({"messages": [("user", "go")]})
    assert final["messages"][-2].content == "3"
    assert list(sink) == []  # not a turn: nothing recorded


def test_a_plain_tool_node_with_a_tool_of_no_known_class_is_refused(rt: Runtime) -> None:
    @tool
    async def odd() -> str:
        """a tool of no known class"""
        return ""

    odd.metadata = {"turnwatch_class": "teleport"}
    model = Scripted(messages=iter([]))
    with pytest.raises(ToolClassError, match="teleport"):
        StoppableGraph(agent_graph(ToolNode([odd]), model), rt)


def test_a_plain_tool_node_with_only_a_sync_hook_is_refused(rt: Runtime) -> None:
    """Its hook runs only on LangGraph's sync path, which a turn never takes: wrapped, the hook
    would be skipped; left, the stop could not reach its calls. Said, with the way out."""

    @tool
    async def add(a: int, b: int) -> int:
        """add"""
        return a + b

    def audit(request: Any, execute: Any) -> Any:
        return execute(request)

    model = Scripted(messages=iter([]))
    with pytest.raises(ToolClassError, match="awrap_tool_call"):
        StoppableGraph(agent_graph(ToolNode([add], wrap_tool_call=audit), model), rt)


async def test_a_tool_node_already_wrapped_is_not_wrapped_again(
    rt: Runtime, sink: MemorySink
) -> None:
    t = Tools()
    node = tool_node(t.all, rt)
    hook = node._awrap_tool_call  # noqa: SLF001 - what the node runs
    graph = t.graph(node, InMemorySaver())
    StoppableGraph(graph, rt)
    StoppableGraph(graph, rt)  # twice
    assert node._awrap_tool_call is hook  # noqa: SLF001
    await stopped_mid_tools(rt, StoppableGraph(graph, rt), t, "w")
    assert [e.call for e in sink if e.kind == names.TOOL_STARTED].count("w1") == 1


async def test_a_graph_given_to_a_second_runtime_runs_its_calls_there(
    rt: Runtime, sink: MemorySink
) -> None:
    """The node was wrapped for the first runtime; the second's turn runs its calls on the
    second's host, and its stop reaches them."""
    t = Tools()
    graph = t.graph(ToolNode(t.all), InMemorySaver())
    StoppableGraph(graph, rt)
    theirs = MemorySink()
    other = Runtime(LocalHost(), grace_s=GRACE, sink=theirs)
    await stopped_mid_tools(other, StoppableGraph(graph, other), t, "o")
    assert outcomes(theirs) == {"r1": "discarded", "p1": "aborted", "w1": "completed_after_stop"}
    assert list(sink) == []
