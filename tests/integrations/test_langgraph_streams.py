"""LangGraph's streams, wrapped: ``astream`` (v1 and v2 parts, with subgraphs) and
``astream_events`` end after the tools step the stop reached, whose answers they carry, before
the model is asked again; what a wrapped stream cannot read is refused before it starts.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

from tests.conftest import until
from tests.integrations.lg_tools import Tools, stopped_while_read, unanswered
from tests.integrations.procs import marked_alive
from turnwatch.integrations.langgraph import StoppableGraph, tool_node
from turnwatch.runtime import MemorySink, Receipt, Runtime
from turnwatch.testing import check_invariants


@pytest.fixture
def rt(runtime: Runtime) -> Runtime:
    return runtime


@pytest.mark.parametrize("mode", ["updates", ["updates", "values"]])
async def test_wrapped_astream_ends_after_the_answers_the_stop_wrote(
    rt: Runtime, sink: MemorySink, checkpointer: Any, mode: Any
) -> None:
    """A consumer of ``astream`` sees the chunks of its own modes up to the stop: the model's
    step, then the tools step that answers every call (its real outcome each), and the stream
    ends there, the model not asked again, nothing left running, the checkpoint valid."""
    t = Tools()
    app = StoppableGraph(t.graph(tool_node(t.all, rt), checkpointer), rt)
    cfg = {"configurable": {"thread_id": "a"}}
    stream = app.astream({"messages": [("user", "go")]}, cfg, session="s", stream_mode=mode)
    got = await stopped_while_read(rt, "s", stream)
    assert t.model_calls == 1
    pairs = got if isinstance(mode, list) else [("updates", c) for c in got]
    assert {m for m, _c in pairs} == set(mode if isinstance(mode, list) else [mode])
    updates = [c for m, c in pairs if m == "updates"]
    assert [next(iter(u)) for u in updates] == ["agent", "tools"]  # and nothing after
    answers = {m.tool_call_id: m for m in updates[-1]["tools"]["messages"]}
    assert set(answers) == {"r1", "p1", "w1"}
    assert str(answers["w1"].content) == "written"  # completed after the stop
    assert "ended" in str(answers["p1"].content)
    state = await app.graph.aget_state(cfg)
    assert unanswered(state.values["messages"]) == set()
    assert check_invariants(list(sink)) == []


async def test_astream_refuses_what_it_cannot_read_before_it_starts(rt: Runtime) -> None:
    t = Tools()
    app = StoppableGraph(t.graph(tool_node(t.all, rt), InMemorySaver()), rt)
    with pytest.raises(TypeError, match="v1 or v2"):
        async for _ in app.astream({"messages": []}, None, session="s", version="v3"):
            pass
    with pytest.raises(TypeError, match="v1 state"):
        await app.ainvoke({"messages": []}, None, session="s", version="v2")
    assert t.model_calls == 0


@pytest.mark.parametrize("subgraphs", [False, True], ids=["parent", "with subgraphs"])
async def test_astream_v2_parts_come_as_langgraph_streams_them_up_to_the_stop(
    rt: Runtime, sink: MemorySink, checkpointer: Any, subgraphs: bool
) -> None:
    """``astream(version="v2")``: LangGraph's typed parts (``type``, ``ns``, ``data``), the
    parent's only unless ``subgraphs=True``; a stop ends the stream after the tools step that
    answers every call."""
    t = Tools()
    inner = t.graph(tool_node(t.all, rt), None)
    g = StateGraph(MessagesState)
    g.add_node("sub", inner)
    g.add_edge(START, "sub")
    g.add_edge("sub", END)
    app = StoppableGraph(g.compile(checkpointer=checkpointer), rt)
    cfg = {"configurable": {"thread_id": f"v2{subgraphs}"}}
    parts: list[Any] = []

    async def read() -> None:
        go = {"messages": [("user", "go")]}
        modes = ["updates", "values"]
        read = app.astream(
            go, cfg, session="v2", stream_mode=modes, version="v2", subgraphs=subgraphs
        )
        async for part in read:
            parts.append(part)

    run = asyncio.ensure_future(read())
    await until(lambda: len(marked_alive("v2")) >= 3, what="the tree to start")
    assert await rt.abort("v2") is Receipt.ACCEPTED
    await asyncio.wait_for(run, 10)
    assert parts
    assert all({"type", "ns", "data"} <= set(p) for p in parts)
    assert {p["type"] for p in parts} <= {"updates", "values"}
    nested = [p for p in parts if p["ns"]]
    assert bool(nested) is subgraphs
    if subgraphs:
        updates = [p["data"] for p in nested if p["type"] == "updates"]
        assert [next(iter(u)) for u in updates] == ["agent", "tools"]
        answered = {m.tool_call_id for m in updates[-1]["tools"]["messages"]}
        assert answered == {"r1", "p1", "w1"}
    assert t.model_calls == 1
    state = await app.graph.aget_state(cfg)
    assert unanswered(state.values["messages"]) == set()
    assert check_invariants(list(sink)) == []


async def test_wrapped_astream_events_ends_after_the_answers_the_stop_wrote(
    runtime: Runtime, sink: MemorySink, checkpointer: Any
) -> None:
    """``astream_events`` (v2), stopped as ``astream`` is: the events end after the tools step
    the stop reached (its node's end carries every answer), before the model is asked again."""
    t = Tools()
    app = StoppableGraph(t.graph(tool_node(t.all, runtime), checkpointer), runtime)
    cfg = {"configurable": {"thread_id": "ev"}}
    stream = app.astream_events({"messages": [("user", "go")]}, cfg, session="ev")
    seen = await stopped_while_read(runtime, "ev", stream)
    assert t.model_calls == 1  # the events ended before the model was asked again
    ends = [e for e in seen if e["event"] == "on_chain_end" and e["name"] == "tools"]
    assert len(ends) == 1  # the tools step's end is the last node's
    state = await app.graph.aget_state(cfg)
    assert unanswered(state.values["messages"]) == set()
    with pytest.raises(TypeError, match="v2"):
        async for _ in app.astream_events(None, cfg, session="ev", version="v1"):
            pass
    assert check_invariants(list(sink)) == []


@pytest.mark.parametrize("modes", ["updates", ["updates", "values"]], ids=["one mode", "a list"])
async def test_astream_with_subgraphs_passes_their_chunks_on_and_stops_after_their_tools(
    rt: Runtime, sink: MemorySink, checkpointer: Any, modes: Any
) -> None:
    """``astream(subgraphs=True)``, as LangGraph streams it: each chunk with its namespace,
    ``(ns, chunk)`` for one mode and ``(ns, mode, chunk)`` for a list; a stop ends the stream
    after the subgraph's tools step, whose update answers every call, the model not asked again."""
    t = Tools()
    g = StateGraph(MessagesState)
    g.add_node("sub", t.graph(tool_node(t.all, rt), None))
    g.add_edge(START, "sub")
    g.add_edge("sub", END)
    app = StoppableGraph(g.compile(checkpointer=checkpointer), rt)
    cfg = {"configurable": {"thread_id": "sgs"}}
    items: list[Any] = []

    async def read() -> None:
        go = {"messages": [("user", "go")]}
        async for item in app.astream(go, cfg, session="sgs", stream_mode=modes, subgraphs=True):
            items.append(item)

    run = asyncio.ensure_future(read())
    await until(lambda: len(marked_alive("sgs")) >= 3, what="the tree to start")
    assert await rt.abort("sgs") is Receipt.ACCEPTED
    await asyncio.wait_for(run, 10)
    width = 2 if isinstance(modes, str) else 3
    assert items
    assert all(isinstance(i, tuple) and len(i) == width and isinstance(i[0], tuple) for i in items)
    updates = [i[-1] for i in items if i[0] and (width == 2 or i[1] == "updates")]
    assert [next(iter(u)) for u in updates] == ["agent", "tools"]  # the subgraph's, then none
    answered = {m.tool_call_id for m in updates[-1]["tools"]["messages"]}
    assert answered == {"r1", "p1", "w1"}
    assert all(str(i[0][0]).startswith("sub:") for i in items if i[0])
    assert t.model_calls == 1
    assert check_invariants(list(sink)) == []
