"""pydantic-ai's output functions (``output_type=fn``, ``ToolOutput(fn)``), native and wrapped:
one that saves the run's result to a file in chunks.

The model ends a run by calling the output tool; pydantic-ai then runs the output function, in
this process, outside any tool call. Native, a cancel stops it halfway through the file, and the
wrapper's stop (which cancels the run the framework's way) did the same while it reported the
turn settled: the function was no call of the turn's. Wrapped, it is a turnwatch call under the
output tool call's id, ``mutating`` unless its tool's metadata says otherwise: awaited, the file
whole. Streamed (``run_stream``), the same as the stream is read to its output (a partial output
runs the function outside any call: pydantic-ai asks such a function to do nothing then).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, CancellationToken, RunContext, ToolOutput
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from tests.integrations.verdicts import no_violations, outcomes
from turnwatch import names
from turnwatch.integrations.pydantic_ai import StoppableAgent
from turnwatch.runtime import MemorySink, Receipt, Runtime

CHUNKS = 20
CHUNK_S = 0.05


class Saver:
    """An output function: saves the report to ``path`` in CHUNKS chunks, CHUNK_S apart."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.begun = asyncio.Event()
        self.ran = 0

    async def save(self, report: str) -> str:
        """Save the report."""
        self.ran += 1
        with open(self.path, "w") as fh:
            for _ in range(CHUNKS):
                fh.write("x" * 10)
                fh.flush()
                self.begun.set()
                await asyncio.sleep(CHUNK_S)
        return f"saved {report}"


def reporting(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A model that ends the run at once through the output tool (call ``o1``)."""
    (tool,) = info.output_tools
    return ModelResponse(parts=[ToolCallPart(tool.name, {"report": "r"}, "o1")])


def agent_of(saver: Saver, **output: Any) -> Agent[None, str]:
    async def save(report: str) -> str:
        """Save the report."""
        return await saver.save(report)

    return Agent(FunctionModel(reporting), output_type=ToolOutput(save, **output))


async def test_native_a_cancel_leaves_the_output_half_saved(tmp_path: Path) -> None:
    saver = Saver(tmp_path / "f")
    token = CancellationToken()
    run = asyncio.ensure_future(agent_of(saver).run("go", cancellation_token=token))
    await asyncio.wait_for(saver.begun.wait(), 10)
    token.cancel()
    with pytest.raises(RunCancelled):
        await run
    await asyncio.sleep(CHUNKS * CHUNK_S)
    assert 0 < saver.path.stat().st_size < CHUNKS * 10


async def test_wrapped_an_output_function_in_flight_is_awaited_whole(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    saver = Saver(tmp_path / "f")
    run = asyncio.ensure_future(StoppableAgent(agent_of(saver), runtime).run("go", session="s"))
    await asyncio.wait_for(saver.begun.wait(), 10)
    assert await runtime.abort("s") is Receipt.ACCEPTED
    assert saver.path.stat().st_size == CHUNKS * 10  # abort() returned once it was whole
    with pytest.raises(RunCancelled):
        await run
    started = sink.of(names.TOOL_STARTED)
    assert [(e.call, e.tool, e.attrs[names.K_CLASS]) for e in started] == [
        ("o1", "final_result", "mutating")
    ]
    assert outcomes(sink) == {"o1": "completed_after_stop"}
    kinds = [e.kind for e in sink]
    assert kinds.index(names.TOOL_FINISHED) < kinds.index(names.TURN_SETTLED)
    no_violations(sink)


async def test_wrapped_an_output_function_in_time_is_the_runs_output(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    saver = Saver(tmp_path / "f")
    result = await StoppableAgent(agent_of(saver), runtime).run("go", session="s")
    assert result.output == "saved r"
    assert saver.ran == 1
    assert outcomes(sink) == {"o1": "completed"}
    no_violations(sink)


async def test_a_run_without_an_output_function_makes_no_call(
    runtime: Runtime, sink: MemorySink
) -> None:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("done")])

    result = await StoppableAgent(Agent(FunctionModel(answer)), runtime).run("go", session="s")
    assert result.output == "done"
    assert sink.of(names.TOOL_REQUESTED) == []


# --- run_stream: the output function runs as the stream is read ---


async def streaming(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
    """The same model, streamed: the output tool's call (``o1``) in two deltas."""
    (tool,) = info.output_tools
    yield {0: DeltaToolCall(name=tool.name, json_args='{"report": ', tool_call_id="o1")}
    yield {0: DeltaToolCall(json_args='"r"}')}


def streamed_agent_of(saver: Saver) -> Agent[None, str]:
    async def save(ctx: RunContext[None], report: str) -> str:
        """Save the report."""
        if ctx.partial_output:  # as pydantic-ai asks of a function with effects
            return report
        return await saver.save(report)

    return Agent(FunctionModel(stream_function=streaming), output_type=ToolOutput(save))


async def test_run_stream_an_output_function_read_to_its_end_is_the_outputs_call(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    saver = Saver(tmp_path / "f")
    wrapped = StoppableAgent(streamed_agent_of(saver), runtime)
    async with wrapped.run_stream("go", session="s") as stream:
        assert await stream.get_output() == "saved r"
    assert saver.ran == 1
    assert outcomes(sink) == {"o1": "completed"}
    no_violations(sink)


async def test_run_stream_a_stop_while_the_output_function_runs_awaits_it_whole(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    saver = Saver(tmp_path / "f")
    wrapped = StoppableAgent(streamed_agent_of(saver), runtime)

    async def read() -> None:
        async with wrapped.run_stream("go", session="s") as stream:
            await stream.get_output()

    run = asyncio.ensure_future(read())
    await asyncio.wait_for(saver.begun.wait(), 10)
    assert await runtime.abort("s") is Receipt.ACCEPTED
    assert saver.path.stat().st_size == CHUNKS * 10  # abort() returned once it was whole
    with pytest.raises(RunCancelled):
        await run
    assert outcomes(sink) == {"o1": "completed_after_stop"}
    no_violations(sink)
