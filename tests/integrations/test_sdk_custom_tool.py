"""The Agents SDK's custom tools (``CustomTool``: a raw string input, not JSON), native and
wrapped: a tool of the application's own that writes a file in chunks.

The SDK runs a custom tool's ``on_invoke_tool`` outside any function tool. Native, its cancel
stops the tool halfway through the file. Wrapped, each call is a turnwatch call of the model's
call id, of the class it is given, else ``mutating``: awaited, the file written whole; a call
approved after the stop never runs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agents import Agent, CustomTool, Runner
from agents.testing import ModelStep, ScriptedModel, assistant_message
from openai.types.responses import ResponseCustomToolCall

from tests.integrations.test_openai_agents import approved_after_the_stop, consume
from tests.integrations.test_sdk_apply_patch import (
    CHUNK_S,
    CHUNKS,
    stopped_while_writing,
    write_in_chunks,
)
from tests.integrations.test_sdk_shell import streamed
from tests.integrations.verdicts import no_violations, outcomes
from turnwatch import names
from turnwatch.integrations.openai_agents import StoppableRunner, tool_class
from turnwatch.runtime import MemorySink, Runtime


class Writer:
    """A custom tool's body: writes the file its input names in chunks (``write_in_chunks``)."""

    def __init__(self) -> None:
        self.begun = asyncio.Event()
        self.ran: list[str] = []

    async def __call__(self, ctx: Any, text: str) -> str:
        self.ran.append(text)
        await write_in_chunks(text, self.begun)
        return f"wrote {text}"


def agent_with(writer: Writer, path: Path, **tool: Any) -> Agent[Any]:
    call = ResponseCustomToolCall(
        call_id="w1", input=str(path), name="write", type="custom_tool_call"
    )
    model = ScriptedModel([streamed(call), ModelStep(output=[assistant_message("done")])])
    custom = CustomTool(name="write", description="Write a file.", on_invoke_tool=writer, **tool)
    return Agent(name="a", model=model, tools=[custom])


async def test_native_a_cancel_leaves_the_file_half_written(tmp_path: Path) -> None:
    target, writer = tmp_path / "f", Writer()
    result = Runner.run_streamed(agent_with(writer, target), "go")
    reading = asyncio.ensure_future(consume(result))
    await asyncio.wait_for(writer.begun.wait(), 10)
    result.cancel("immediate")
    await reading
    await asyncio.sleep(CHUNKS * CHUNK_S)
    assert 0 < target.stat().st_size < CHUNKS * 10


async def test_wrapped_a_call_in_flight_is_awaited_whole(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target, writer = tmp_path / "f", Writer()
    runner = StoppableRunner(agent_with(writer, target), runtime)
    await stopped_while_writing(runner, runtime, writer.begun, target)
    started = sink.of(names.TOOL_STARTED)
    assert [(e.call, e.tool, e.attrs[names.K_CLASS]) for e in started] == [
        ("w1", "write", "mutating")
    ]
    assert outcomes(sink) == {"w1": "completed_after_stop"}
    no_violations(sink)


async def test_wrapped_a_call_in_time_is_the_tools_result(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target, writer = tmp_path / "f", Writer()
    result = await StoppableRunner(agent_with(writer, target), runtime).run("go", session="s")
    assert result.final_output == "done"
    outputs = [i.output for i in result.new_items if type(i).__name__ == "ToolCallOutputItem"]
    assert outputs == [f"wrote {target}"]
    assert outcomes(sink) == {"w1": "completed"}
    no_violations(sink)


async def test_wrapped_a_call_approved_after_the_stop_never_runs(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target, writer = tmp_path / "f", Writer()
    runner = StoppableRunner(agent_with(writer, target, needs_approval=True), runtime)
    await approved_after_the_stop(runner, runtime, sink)
    assert writer.ran == []
    no_violations(sink)


def test_a_custom_tool_is_of_the_class_it_is_given(runtime: Runtime, tmp_path: Path) -> None:
    agent = agent_with(Writer(), tmp_path / "f")
    (custom,) = agent.tools
    assert isinstance(custom, CustomTool)
    agent.tools = [tool_class(custom, "read_only")]
    assert StoppableRunner(agent, runtime).classes["write"].value == "read_only"
