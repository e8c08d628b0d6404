"""A reader that leaves a wrapped run's stream before its end (a ``break``, a closed connection)
stops the run: one rule for the four wrappers, source ``cancel``, the turn ``aborted``.

The SDK's stream and pydantic-ai's ``iter``/``run_stream`` are tested with their wrappers; here
LangGraph's ``astream``/``astream_events`` and ADK's ``run_async``, which recorded such a turn
``failed`` (as if the run had raised) and ran no stop.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from tests.integrations import adk_parts as adk
from tests.integrations.lg_tools import Tools, unanswered
from tests.integrations.test_wrapper_edges import settled, stop_sources
from turnwatch.integrations.langgraph import StoppableGraph, tool_node
from turnwatch.runtime import MemorySink, Runtime
from turnwatch.testing import check_invariants


async def read_until(
    stream: AsyncGenerator[Any, None], enough: Callable[[Any], bool] = bool
) -> Any:
    """Items up to the first that is ``enough``, then the reader goes (closing the stream, as
    ``async with`` does)."""
    async with contextlib.aclosing(stream) as items:
        async for item in items:
            if enough(item):
                return item
    raise AssertionError("the stream ended first")


def agent_step_ended(event: dict[str, Any]) -> bool:
    return bool(event["event"] == "on_chain_end" and event["name"] == "agent")


def left_as_a_stop(runtime: Runtime, sink: MemorySink, session: str) -> None:
    assert stop_sources(sink) == ["cancel"]
    assert settled(sink) == ["aborted"]
    assert not runtime.session(session).processing
    assert check_invariants(list(sink)) == []


@pytest.mark.parametrize("how", ["astream", "astream_events"])
async def test_langgraph_a_reader_that_leaves_stops_the_run(
    runtime: Runtime, sink: MemorySink, how: str
) -> None:
    t = Tools()
    app = StoppableGraph(t.graph(tool_node(t.all, runtime), InMemorySaver()), runtime)
    cfg = {"configurable": {"thread_id": "a"}}
    prompt = {"messages": [("user", "go")]}
    if how == "astream":
        first = await read_until(app.astream(prompt, cfg, session="s", stream_mode="updates"))
        assert next(iter(first)) == "agent"
    else:
        await read_until(app.astream_events(prompt, cfg, session="s"), agent_step_ended)
    left_as_a_stop(runtime, sink, "s")
    assert t.started == []  # the tools step the model asked for never ran
    # The thread goes on from there: its next run answers the calls left, and is valid.
    await app.ainvoke({"messages": [("user", "again")]}, cfg, session="s")
    state = await app.graph.aget_state(cfg)
    assert unanswered(state.values["messages"]) == set()


async def test_adk_a_reader_that_leaves_stops_the_run(runtime: Runtime, sink: MemorySink) -> None:
    t = adk.Tools()
    runner, app = adk.wrapped(runtime, t.all, adk.model(adk.STEP))
    sid = await adk.new_session(runner)
    await read_until(app.run_async(user_id="u", session_id=sid, new_message=adk.HI))
    left_as_a_stop(runtime, sink, sid)
