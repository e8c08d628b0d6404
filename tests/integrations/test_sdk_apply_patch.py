"""The Agents SDK's apply_patch tool (``ApplyPatchTool``), native and wrapped: an editor of the
application's own that writes a file in chunks.

The SDK hands each operation of an apply_patch call to the tool's editor, outside any function
tool. Native, its cancel stops an async editor halfway through the file. Wrapped, each operation
is a turnwatch call of the model's call id, ``mutating`` unless said: awaited, the file written
whole; an operation the stop came before never starts, and an approval given after the stop
never reaches the editor.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, ApplyPatchTool, Runner
from agents.editor import ApplyPatchOperation, ApplyPatchResult
from agents.testing import ModelStep, ScriptedModel, assistant_message
from openai.types.responses import ResponseApplyPatchToolCall
from openai.types.responses.response_apply_patch_tool_call import OperationCreateFile

from tests.integrations.test_openai_agents import (
    approved_after_the_stop,
    approved_in_time,
    consume,
)
from tests.integrations.test_sdk_shell import streamed
from tests.integrations.verdicts import no_violations, outcomes
from turnwatch import names
from turnwatch.integrations.openai_agents import (
    RunStopped,
    StoppableRunner,
    ToolClassError,
    tool_class,
)
from turnwatch.runtime import MemorySink, Receipt, Runtime

CHUNKS = 20
CHUNK_S = 0.05


async def write_in_chunks(path: str, begun: asyncio.Event) -> None:
    """Write ``path`` in CHUNKS chunks, CHUNK_S apart; ``begun`` is set at the first."""
    with open(path, "w") as fh:
        for _ in range(CHUNKS):
            fh.write("x" * 10)
            fh.flush()
            begun.set()
            await asyncio.sleep(CHUNK_S)


async def stopped_while_writing(
    runner: StoppableRunner, runtime: Runtime, begun: asyncio.Event, target: Path
) -> None:
    """A run of session ``s`` stopped while its call writes ``target``: ``abort()`` returns once
    the file is whole, and the run raises RunStopped."""
    run = asyncio.ensure_future(runner.run("go", session="s"))
    await asyncio.wait_for(begun.wait(), 10)
    assert await runtime.abort("s") is Receipt.ACCEPTED
    assert target.stat().st_size == CHUNKS * 10
    with pytest.raises(RunStopped):
        await run


class Editor:
    """Writes a created file in chunks (:func:`write_in_chunks`)."""

    def __init__(self) -> None:
        self.begun = asyncio.Event()
        self.paths: list[str] = []

    async def create_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        self.paths.append(operation.path)
        await write_in_chunks(operation.path, self.begun)
        return ApplyPatchResult(status="completed", output=f"created {operation.path}")

    async def update_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        raise AssertionError("not asked for")

    async def delete_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        raise AssertionError("not asked for")


def creating(path: Path, call_id: str = "p1") -> ScriptedModel:
    """A model that asks to create ``path`` (one apply_patch call), then says it is done."""
    call = ResponseApplyPatchToolCall(
        id=f"ap_{call_id}",
        call_id=call_id,
        type="apply_patch_call",
        status="completed",
        operation=OperationCreateFile(type="create_file", path=str(path), diff="+x\n"),
    )
    return ScriptedModel([streamed(call), ModelStep(output=[assistant_message("done")])])


def agent_with(editor: Editor, path: Path, **tool: Any) -> Agent[Any]:
    return Agent(name="a", model=creating(path), tools=[ApplyPatchTool(editor=editor, **tool)])


async def test_native_a_cancel_leaves_the_file_half_written(tmp_path: Path) -> None:
    target, editor = tmp_path / "f", Editor()
    result = Runner.run_streamed(agent_with(editor, target), "go")
    reading = asyncio.ensure_future(consume(result))
    await asyncio.wait_for(editor.begun.wait(), 10)
    result.cancel("immediate")
    await reading
    await asyncio.sleep(CHUNKS * CHUNK_S)  # the editor had all the time it needed
    assert 0 < target.stat().st_size < CHUNKS * 10


async def test_wrapped_an_edit_in_flight_is_awaited_whole(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target, editor = tmp_path / "f", Editor()
    runner = StoppableRunner(agent_with(editor, target), runtime)
    await stopped_while_writing(runner, runtime, editor.begun, target)
    started = sink.of(names.TOOL_STARTED)
    assert [(e.call, e.tool, e.attrs[names.K_CLASS]) for e in started] == [
        ("p1", "apply_patch", "mutating")
    ]
    assert outcomes(sink) == {"p1": "completed_after_stop"}
    kinds = [e.kind for e in sink]
    assert kinds.index(names.TOOL_FINISHED) < kinds.index(names.TURN_SETTLED)
    no_violations(sink)


async def test_wrapped_an_edit_in_time_is_the_editors_result(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target, editor = tmp_path / "f", Editor()
    result = await StoppableRunner(agent_with(editor, target), runtime).run("go", session="s")
    assert result.final_output == "done"
    outputs = [i.output for i in result.new_items if type(i).__name__ == "ToolCallOutputItem"]
    assert outputs == [f"created {target}"]
    assert outcomes(sink) == {"p1": "completed"}
    no_violations(sink)


async def test_wrapped_an_edit_approved_after_the_stop_never_reaches_the_editor(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target, editor = tmp_path / "f", Editor()
    runner = StoppableRunner(agent_with(editor, target, needs_approval=True), runtime)
    await approved_after_the_stop(runner, runtime, sink)
    assert editor.paths == []
    assert not target.exists()
    no_violations(sink)


async def test_wrapped_an_edit_approved_in_time_runs_as_the_prompts_call(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target, editor = tmp_path / "f", Editor()
    runner = StoppableRunner(agent_with(editor, target, needs_approval=True), runtime)
    result = await approved_in_time(runner)
    assert result.final_output == "done"
    assert target.stat().st_size == CHUNKS * 10
    assert outcomes(sink) == {"p1": "completed"}
    no_violations(sink)


def test_an_editor_is_of_the_class_it_is_given_and_never_a_process(
    runtime: Runtime, tmp_path: Path
) -> None:
    editor = Editor()
    marked = Agent(
        name="a",
        model=creating(tmp_path / "f"),
        tools=[tool_class(ApplyPatchTool(editor=editor), "read_only")],
    )
    assert StoppableRunner(marked, runtime).classes["apply_patch"].value == "read_only"
    with pytest.raises(ToolClassError, match="apply_patch"):
        StoppableRunner(
            agent_with(editor, tmp_path / "f"), runtime, classes={"apply_patch": "process"}
        )
