"""pydantic-ai driven node by node (``iter``) and streamed (``run_stream``), wrapped: the same
stop as ``run``'s, real processes and real writes, a model streaming from ``FunctionModel``.

A chat UI streams; its Stop button is the stop these runs must honour. Left unwrapped (the
agent's own ``iter``/``run_stream``), a stopped run leaves its process tree alive and its calls
unrecorded; wrapped, ``rt.abort()`` returns once each call is released under its policy, and
leaving a run before its end is a stop (source ``cancel``) rather than a turn live for ever.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolResults
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from tests.conftest import until
from tests.integrations.pai_parts import (
    CHUNK,
    CHUNKS,
    TERM_IGNORING_TREE,
    approval_agent,
    begun,
    calls,
    marked_alive,
    write_in_chunks,
)
from tests.integrations.test_wrapper_edges import settled, stop_sources
from tests.integrations.verdicts import no_violations, outcomes
from turnwatch import names
from turnwatch.integrations.pydantic_ai import StoppableAgent, run_command
from turnwatch.runtime import MemorySink, Receipt, Runtime


def streamed(*tool_calls: tuple[str, dict[str, Any], str], text: str = "done") -> Any:
    """A streaming model: its first response asks for ``tool_calls`` (if any); the next says
    ``text`` in three pieces."""

    async def model(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        if len(messages) == 1 and tool_calls:
            for i, (name, args, call_id) in enumerate(tool_calls):
                delta: DeltaToolCalls = {
                    i: DeltaToolCall(name=name, json_args=json.dumps(args), tool_call_id=call_id)
                }
                yield delta
            return
        for piece in (text[:1], text[1:2], text[2:]):
            yield piece

    return model


def process_agent() -> Agent[None, str]:
    model = FunctionModel(
        calls(ToolCallPart("sh", {}, tool_call_id="p1")), stream_function=streamed(("sh", {}, "p1"))
    )
    agent = Agent(model)

    @agent.tool_plain(metadata={"turnwatch_class": "process"})
    async def sh() -> str:
        return (await run_command(["bash", "-c", TERM_IGNORING_TREE])).output

    return agent


def returned(messages: list[ModelMessage]) -> list[str]:
    return [
        str(p.content)
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]


# --- iter: the run driven node by node ---


@pytest.mark.parametrize("how", ["iter", "run_stream_events"])
async def test_a_stopped_process_tool_ends_within_its_grace(
    runtime: Runtime, sink: MemorySink, how: str
) -> None:
    """Driven node by node, or read as events (the run in a task of its own): the same stop."""
    wrapped = StoppableAgent(process_agent(), runtime)

    async def drive() -> None:
        async with getattr(wrapped, how)("go", session="s") as run:
            async for _item in run:
                pass

    task = asyncio.ensure_future(drive())
    await until(lambda: len(marked_alive()) >= 3, what="the tree to start")
    assert await runtime.abort("s") is Receipt.ACCEPTED
    # abort() returned: nothing of the call outlived the grace window.
    assert marked_alive() == []
    with pytest.raises(RunCancelled):
        await task
    assert outcomes(sink) == {"p1": "aborted"}
    assert settled(sink) == ["aborted"]
    no_violations(sink)


async def test_iter_driven_to_its_end_completes_its_turn(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target = tmp_path / "big"
    agent = Agent(FunctionModel(calls(ToolCallPart("write", {"path": str(target)}, "w1"))))
    agent.tool_plain(name="write")(write_in_chunks)
    async with StoppableAgent(agent, runtime).iter("go", session="s") as run:
        async for _node in run:
            pass
    assert run.result is not None
    assert run.result.output == "['written']"
    assert outcomes(sink) == {"w1": "completed"}
    assert settled(sink) == ["completed"]
    assert not runtime.session("s").processing
    no_violations(sink)


async def test_leaving_iter_before_its_end_is_a_stop(runtime: Runtime, sink: MemorySink) -> None:
    agent = Agent(FunctionModel(calls(ToolCallPart("write", {"path": "/nonexistent"}, "w1"))))
    agent.tool_plain(name="write")(write_in_chunks)
    async with StoppableAgent(agent, runtime).iter("go", session="s") as run:
        async for _node in run:
            break  # the user's code had what it wanted: nobody drives the run any more
    # Not a turn live for ever ("processing"): stopped, said so, and nothing ran.
    assert stop_sources(sink) == ["cancel"]
    assert settled(sink) == ["aborted"]
    assert outcomes(sink) == {}
    assert not runtime.session("s").processing
    no_violations(sink)


async def test_iter_a_run_that_asks_for_approval_keeps_its_turn_until_answered(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target = tmp_path / "victim"
    target.write_text("x")
    agent, seen = approval_agent(target)
    wrapped = StoppableAgent(agent, runtime)
    async with wrapped.iter("go", session="s") as first:
        async for _node in first:
            pass
    # The run ended asking: its turn waits for the answer (the prompt is open, nothing settled).
    assert settled(sink) == []
    assert [e.kind for e in sink].count(names.PERMISSION_REQUESTED) == 1
    assert first.result is not None
    async with wrapped.iter(
        message_history=first.result.all_messages(),
        session="s",
        deferred_tool_results=DeferredToolResults(approvals={"a1": True}),
    ) as second:
        async for _node in second:
            pass
    assert not target.exists()
    assert seen == ["deleted"]
    assert settled(sink) == ["completed"]
    no_violations(sink)


# --- run_stream: the output streamed to a reader ---


async def test_run_stream_a_stopped_write_is_awaited_to_its_end(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target = tmp_path / "big"
    agent = Agent(FunctionModel(stream_function=streamed(("write", {"path": str(target)}, "w1"))))
    agent.tool_plain(name="write")(write_in_chunks)  # mutating by default

    async def read() -> None:
        async with StoppableAgent(agent, runtime).run_stream("go", session="s") as stream:
            async for _text in stream.stream_text():
                pass

    task = asyncio.ensure_future(read())
    await until(lambda: begun(target), what="the write to begin")
    assert await runtime.abort("s") is Receipt.ACCEPTED
    # Settled only once the write was whole.
    assert target.stat().st_size == CHUNKS * len(CHUNK)
    with pytest.raises(RunCancelled):
        await task
    assert outcomes(sink) == {"w1": "completed_after_stop"}
    assert settled(sink) == ["aborted"]
    no_violations(sink)


async def test_run_stream_read_to_its_end_completes_its_turn_after_its_last_call(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target = tmp_path / "big"
    agent = Agent(FunctionModel(stream_function=streamed(("write", {"path": str(target)}, "w1"))))
    agent.tool_plain(name="write")(write_in_chunks)
    async with StoppableAgent(agent, runtime).run_stream("go", session="s") as stream:
        text = [t async for t in stream.stream_text(delta=True)]
    assert "".join(text) == "done"
    assert returned(stream.all_messages()) == ["written"]
    assert outcomes(sink) == {"w1": "completed"}
    kinds = [e.kind for e in sink]
    assert kinds.index(names.TOOL_FINISHED) < kinds.index(names.TURN_SETTLED)
    assert settled(sink) == ["completed"]
    no_violations(sink)


async def test_a_stream_left_unread_is_a_stop(runtime: Runtime, sink: MemorySink) -> None:
    agent = Agent(FunctionModel(stream_function=streamed()))
    async with StoppableAgent(agent, runtime).run_stream("go", session="s"):
        pass  # the reader went away before the answer streamed
    assert stop_sources(sink) == ["cancel"]
    assert settled(sink) == ["aborted"]
    assert not runtime.session("s").processing
    no_violations(sink)


async def test_a_stream_whose_reader_is_cancelled_is_a_stop_bounded_by_the_grace_window(
    runtime: Runtime, sink: MemorySink
) -> None:
    agent = Agent(FunctionModel(stream_function=streamed(("sh", {}, "p1"))))

    @agent.tool_plain(metadata={"turnwatch_class": "process"})
    async def sh() -> str:
        return (await run_command(["bash", "-c", TERM_IGNORING_TREE])).output

    async def read() -> None:
        async with StoppableAgent(agent, runtime).run_stream("go", session="s") as stream:
            await stream.get_output()

    task = asyncio.ensure_future(read())
    await until(lambda: len(marked_alive()) >= 3, what="the tree to start")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert marked_alive() == []
    assert stop_sources(sink) == ["cancel"]
    assert outcomes(sink) == {"p1": "aborted"}
    assert settled(sink) == ["aborted"]
    no_violations(sink)


# --- run_stream_events: the run's events, the run in a task of its own ---


async def test_run_stream_events_the_handles_cancel_is_the_same_stop(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target = tmp_path / "big"
    agent = Agent(FunctionModel(stream_function=streamed(("write", {"path": str(target)}, "w1"))))
    agent.tool_plain(name="write")(write_in_chunks)
    wrapped = StoppableAgent(agent, runtime)

    async def cancel_once_begun(events: Any) -> None:
        await until(lambda: begun(target), what="the write to begin")
        events.cancel()  # the framework's own handle: from a key handler, say

    cancelling: list[asyncio.Future[None]] = []

    async def read() -> None:
        async with wrapped.run_stream_events("go", session="s") as events:
            cancelling.append(asyncio.ensure_future(cancel_once_begun(events)))
            async for _event in events:
                pass

    with pytest.raises(RunCancelled):
        await read()
    await cancelling[0]
    # The framework's cancel ran the walk: the write was awaited whole, the turn settled after.
    assert target.stat().st_size == CHUNKS * len(CHUNK)
    assert stop_sources(sink) == ["framework"]
    assert outcomes(sink) == {"w1": "completed_after_stop"}
    assert settled(sink) == ["aborted"]
    no_violations(sink)


async def test_run_stream_events_read_to_the_end_completes_and_left_early_stops(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target = tmp_path / "big"
    agent = Agent(FunctionModel(stream_function=streamed(("write", {"path": str(target)}, "w1"))))
    agent.tool_plain(name="write")(write_in_chunks)
    wrapped = StoppableAgent(agent, runtime)
    async with wrapped.run_stream_events("go", session="s") as events:
        kinds = [type(event).__name__ async for event in events]
    assert kinds[-1] == "AgentRunResultEvent"
    assert settled(sink) == ["completed"]
    async with wrapped.run_stream_events("go", session="s") as events:
        async for _event in events:
            break
    assert stop_sources(sink) == ["cancel"]
    assert settled(sink) == ["completed", "aborted"]
    assert not runtime.session("s").processing
    no_violations(sink)


async def test_a_server_whose_client_went_away_stops_the_run(
    runtime: Runtime, sink: MemorySink
) -> None:
    """A web server streams the answer from an async generator; the client disconnects, and the
    server closes the generator (``GeneratorExit`` inside the block): a stop, not a failure."""
    agent = Agent(FunctionModel(stream_function=streamed()))
    wrapped = StoppableAgent(agent, runtime)

    async def chat() -> AsyncGenerator[str, None]:
        async with wrapped.run_stream("go", session="s") as stream:
            async for text in stream.stream_text(delta=True):
                yield text

    response = chat()
    assert await anext(response)  # the first words reached the client
    await response.aclose()
    assert stop_sources(sink) == ["cancel"]
    assert settled(sink) == ["aborted"]
    assert not runtime.session("s").processing
    no_violations(sink)
