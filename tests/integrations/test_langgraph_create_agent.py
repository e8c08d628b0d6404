"""LangChain's ``create_agent``, wrapped by :class:`TurnwatchMiddleware`: the same stop as a
``tool_node``'s (each call by its class, every call answered, a resume reruns nothing), a sync
tool awaited in its thread, and outside a stoppable graph LangGraph's own run.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from tests.conftest import until
from tests.integrations.lg_graphs import Scripted
from tests.integrations.lg_tools import CALLS, Tools, classed, unanswered
from tests.integrations.procs import marked_alive
from turnwatch import names
from turnwatch.integrations.langgraph import StoppableGraph
from turnwatch.runtime import MemorySink, Receipt, Runtime
from turnwatch.testing import check_invariants


@pytest.fixture
def rt(runtime: Runtime) -> Runtime:
    return runtime


def counted(messages: list[AIMessage], asked: list[int]) -> Any:
    """The scripted answers, counting how many the model gave."""
    for m in messages:
        asked[0] += 1
        yield m


async def test_create_agent_wrapped_by_its_middleware_stops_the_adrs_way(
    rt: Runtime, sink: MemorySink, checkpointer: Any
) -> None:
    """LangChain's ``create_agent`` with :class:`TurnwatchMiddleware`: the same stop as a
    ``tool_node``'s (each call by its class, every call answered, a resume reruns nothing)."""
    from langchain.agents import create_agent

    from turnwatch.integrations.langgraph_middleware import TurnwatchMiddleware

    t = Tools()
    asked = [0]
    script = [AIMessage(content="", tool_calls=CALLS)] + [AIMessage(content="done")] * 3
    agent = create_agent(
        model=Scripted(messages=counted(script, asked)),
        tools=t.all,
        middleware=[TurnwatchMiddleware(rt, t.all)],
        checkpointer=checkpointer,
    )
    app = StoppableGraph(agent, rt)
    cfg = {"configurable": {"thread_id": "ca"}}
    run = asyncio.ensure_future(app.ainvoke({"messages": [("user", "go")]}, cfg, session="ca"))
    await until(lambda: len(marked_alive("ca")) >= 3 and t.started, what="the tools")
    assert await rt.abort("ca") is Receipt.ACCEPTED
    assert marked_alive("ca") == []  # nothing of the process call outlived abort()
    assert t.written == ["a"]  # the write awaited
    final = await asyncio.wait_for(run, 10)
    assert asked[0] == 1  # the model was not asked again after the stop
    assert unanswered(final["messages"]) == set()
    state = await app.graph.aget_state(cfg)
    assert unanswered(state.values["messages"]) == set()
    await app.ainvoke(None, cfg, session="ca")  # the resume asks the model, reruns no call
    assert t.started == t.written == ["a"]
    ended = {
        str(e.call): e.attrs.get("outcome")
        for e in sink
        if e.kind == names.TOOL_FINISHED and e.call is not None
    }
    assert ended == {"p1": "aborted", "w1": "completed_after_stop"}
    assert [e.call for e in sink if e.kind == names.TOOL_RESULT_DISCARDED] == ["r1"]
    assert check_invariants(list(sink)) == []


async def test_create_agent_outside_a_stoppable_graph_runs_as_langgraph_runs_it(
    rt: Runtime, sink: MemorySink
) -> None:
    from langchain.agents import create_agent

    from turnwatch.integrations.langgraph_middleware import TurnwatchMiddleware

    @classed("mutating")
    @tool
    async def write(text: str) -> str:
        """a write"""
        return "written"

    script = [AIMessage(content="", tool_calls=[CALLS[2]]), AIMessage(content="done")]
    agent = create_agent(
        model=Scripted(messages=iter(script)),
        tools=[write],
        middleware=[TurnwatchMiddleware(rt, [write])],
    )
    out = await agent.ainvoke({"messages": [("user", "go")]})  # type: ignore[call-overload]
    assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == ["written"]
    assert list(sink) == []  # no turn, no event: LangGraph's own run


async def test_create_agent_a_sync_tool_runs_in_its_thread_and_is_awaited_by_the_stop(
    runtime: Runtime, sink: MemorySink
) -> None:
    """A sync mutating tool (LangGraph runs it in a thread of the pool) under the middleware:
    the stop awaits it to its end, its real result is its answer, the model is not asked
    again."""
    from langchain.agents import create_agent

    from turnwatch.integrations.langgraph_middleware import TurnwatchMiddleware

    began = asyncio.Event()
    loop = asyncio.get_running_loop()
    wrote: list[str] = []

    @classed("mutating")
    @tool
    def save(text: str) -> str:
        """a sync write that takes a while"""
        loop.call_soon_threadsafe(began.set)
        time.sleep(0.5)
        wrote.append(text)
        return "saved"

    call = {"id": "s1", "name": "save", "args": {"text": "x"}}
    script = [AIMessage(content="", tool_calls=[call])] + [AIMessage(content="done")] * 2
    agent = create_agent(
        model=Scripted(messages=iter(script)),
        tools=[save],
        middleware=[TurnwatchMiddleware(runtime, [save])],
        checkpointer=InMemorySaver(),
    )
    app = StoppableGraph(agent, runtime)
    cfg: Any = {"configurable": {"thread_id": "sync"}}
    run = asyncio.ensure_future(app.ainvoke({"messages": [("user", "go")]}, cfg, session="sy"))
    await asyncio.wait_for(began.wait(), 10)
    assert await runtime.abort("sy") is Receipt.ACCEPTED
    assert wrote == ["x"]  # abort() returned once the write had ended
    final = await asyncio.wait_for(run, 10)
    said = [(m.status, m.content) for m in final["messages"] if isinstance(m, ToolMessage)]
    assert said == [("success", "saved")]  # completed after the stop: its real result
    assert [m.content for m in final["messages"]][-1] == "saved"  # the model not asked again
    assert check_invariants(list(sink)) == []
