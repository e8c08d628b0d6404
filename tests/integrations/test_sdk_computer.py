"""The Agents SDK's computer tool (``ComputerTool``), native and wrapped: a computer of the
application's own whose ``type`` writes what it types to a file, in chunks.

The SDK runs a computer call's actions on the tool's computer, outside any function tool.
Native, its cancel stops an async driver halfway through an action. Wrapped, a call's batch of
actions is a turnwatch call of the model's call id, ``mutating`` unless said: awaited, the
action ended whole; a batch the stop came before never starts.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, AsyncComputer, ComputerTool, Runner
from agents.testing import ModelStep, ScriptedModel, assistant_message
from openai.types.responses import ResponseComputerToolCall

from tests.integrations.test_openai_agents import consume
from tests.integrations.test_sdk_apply_patch import (
    CHUNK_S,
    CHUNKS,
    stopped_while_writing,
    write_in_chunks,
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

SCREEN = "c2NyZWVu"  # what the computer's screenshot returns (base64)


class Typist(AsyncComputer):
    """A computer whose ``type`` writes the text's file in chunks (:func:`write_in_chunks`);
    every other action is not asked for."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.begun = asyncio.Event()
        self.typed: list[str] = []

    async def type(self, text: str) -> None:
        self.typed.append(text)
        await write_in_chunks(str(self.target), self.begun)

    async def screenshot(self) -> str:
        return SCREEN

    async def click(self, x: int, y: int, button: Any) -> None:
        raise AssertionError("not asked for")

    async def double_click(self, x: int, y: int) -> None:
        raise AssertionError("not asked for")

    async def scroll(self, x: int, y: int, scroll_x: int, scroll_y: int) -> None:
        raise AssertionError("not asked for")

    async def wait(self) -> None:
        raise AssertionError("not asked for")

    async def move(self, x: int, y: int) -> None:
        raise AssertionError("not asked for")

    async def keypress(self, keys: list[str]) -> None:
        raise AssertionError("not asked for")

    async def drag(self, path: list[tuple[int, int]]) -> None:
        raise AssertionError("not asked for")


def typing(call_id: str = "c1", checks: int = 0) -> ScriptedModel:
    """A model that asks the computer to type (one computer call, with ``checks`` pending
    safety checks), then says it is done."""
    call = ResponseComputerToolCall.model_validate(
        {
            "id": f"cu_{call_id}",
            "call_id": call_id,
            "type": "computer_call",
            "status": "completed",
            "pending_safety_checks": [
                {"id": f"sc{i}", "code": "confirm", "message": "sure?"} for i in range(checks)
            ],
            "actions": [{"type": "type", "text": "hello"}],
        }
    )
    return ScriptedModel([streamed(call), ModelStep(output=[assistant_message("done")])])


def agent_with(computer: Typist, checks: int = 0, **tool: Any) -> Agent[Any]:
    return Agent(
        name="a", model=typing(checks=checks), tools=[ComputerTool(computer=computer, **tool)]
    )


async def test_native_a_cancel_leaves_an_action_half_done(tmp_path: Path) -> None:
    computer = Typist(tmp_path / "typed")
    result = Runner.run_streamed(agent_with(computer), "go")
    reading = asyncio.ensure_future(consume(result))
    await asyncio.wait_for(computer.begun.wait(), 10)
    result.cancel("immediate")
    await reading
    await asyncio.sleep(CHUNKS * CHUNK_S)  # the computer had all the time it needed
    assert 0 < computer.target.stat().st_size < CHUNKS * 10


async def test_wrapped_a_batch_in_flight_is_awaited_whole(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    computer = Typist(tmp_path / "typed")
    runner = StoppableRunner(agent_with(computer), runtime)
    await stopped_while_writing(runner, runtime, computer.begun, computer.target)
    requested = sink.of(names.TOOL_REQUESTED)
    assert [(e.call, e.tool) for e in requested] == [("c1", "computer_use_preview")]
    started = sink.of(names.TOOL_STARTED)
    assert [e.attrs[names.K_CLASS] for e in started] == ["mutating"]
    assert outcomes(sink) == {"c1": "completed_after_stop"}
    kinds = [e.kind for e in sink]
    assert kinds.index(names.TOOL_FINISHED) < kinds.index(names.TURN_SETTLED)
    no_violations(sink)


async def test_wrapped_a_batch_in_time_is_the_computers_screenshot(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    computer = Typist(tmp_path / "typed")
    result = await StoppableRunner(agent_with(computer), runtime).run("go", session="s")
    assert result.final_output == "done"
    outputs = [i.output for i in result.new_items if type(i).__name__ == "ToolCallOutputItem"]
    assert outputs == [f"data:image/png;base64,{SCREEN}"]
    assert computer.typed == ["hello"]
    assert outcomes(sink) == {"c1": "completed"}
    no_violations(sink)


async def test_wrapped_a_batch_the_stop_came_before_never_starts(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    """The SDK awaits the tool's safety-check callback before the batch; one that outlives the
    run's cancel (a review in another task, shielded) acknowledges the check after the stop,
    and the SDK goes on to the batch, which must not start."""
    computer = Typist(tmp_path / "typed")
    asked, review = asyncio.Event(), asyncio.Event()
    went_on = asyncio.Event()

    async def reviewed(_data: Any) -> bool:
        asked.set()
        try:
            await asyncio.shield(review.wait())
        except asyncio.CancelledError:
            await review.wait()  # the review is the user's: it ends when they answer
        went_on.set()
        return True

    runner = StoppableRunner(agent_with(computer, checks=1, on_safety_check=reviewed), runtime)
    run = asyncio.ensure_future(runner.run("go", session="s"))
    await asyncio.wait_for(asked.wait(), 10)
    stop = asyncio.ensure_future(runtime.abort("s"))
    await sink.wait_for(names.ABORT_WALK_STARTED)  # the stop reached the turn
    review.set()  # acknowledged after the stop
    assert await asyncio.wait_for(stop, 10) is Receipt.ACCEPTED
    with pytest.raises(RunStopped):
        await run
    assert went_on.is_set()  # the SDK did go on to the batch, within the run
    assert computer.typed == []
    assert not computer.target.exists()
    assert sink.of(names.TOOL_STARTED) == []
    no_violations(sink)


def test_a_computer_is_of_the_class_it_is_given_and_never_a_process(
    runtime: Runtime, tmp_path: Path
) -> None:
    computer = Typist(tmp_path / "typed")
    marked = Agent(
        name="a",
        model=typing(),
        tools=[tool_class(ComputerTool(computer=computer), "read_only")],
    )
    assert StoppableRunner(marked, runtime).classes["computer_use_preview"].value == "read_only"
    with pytest.raises(ToolClassError, match="computer_use_preview"):
        StoppableRunner(agent_with(computer), runtime, classes={"computer_use_preview": "process"})


async def test_a_wrapped_tool_is_the_sdks_own_outside_a_wrapped_run(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    """The SDK's ``ComputerAction`` is wrapped for the process once a runner wraps a computer
    tool: a run of the agent without the runner runs the batch as the SDK does."""
    computer = Typist(tmp_path / "typed")
    runner = StoppableRunner(agent_with(computer), runtime)  # installs the SDK's wrap
    result = await Runner.run(runner.agent, "go")  # its wrapped copy, run by the SDK alone
    assert result.final_output == "done"
    assert computer.typed == ["hello"]
    assert list(sink) == []
