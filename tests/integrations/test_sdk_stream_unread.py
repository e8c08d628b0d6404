"""A wrapped ``run_streamed()`` whose events nobody reads: the SDK runs it to its end in a task
of its own, and the turn must end with it — not stay "processing" for the runner's life."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, MaxTurnsExceeded, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from tests.integrations.test_openai_agents import approval_agent, consume, scripted
from tests.integrations.test_wrapper_edges import settled
from tests.integrations.verdicts import no_violations, outcomes
from turnwatch import names
from turnwatch.integrations.openai_agents import RunStopped, StoppableRunner
from turnwatch.runtime import MemorySink, Runtime


async def wait_settled(sink: MemorySink) -> None:
    await asyncio.wait_for(sink.wait_for(names.TURN_SETTLED), 10)


def read_agent(seen: list[str]) -> Agent[Any]:
    @function_tool
    def read(path: str) -> str:
        """Read a file."""
        seen.append(path)
        return "contents"

    return Agent(name="a", model=scripted(("read", {"path": "x"}, "r1")), tools=[read])


async def test_an_unread_run_settles_its_turn_when_the_sdk_ends_it(
    runtime: Runtime, sink: MemorySink
) -> None:
    seen: list[str] = []
    stream = StoppableRunner(read_agent(seen), runtime).run_streamed("go", session="s")
    await wait_settled(sink)
    assert settled(sink) == ["completed"]
    assert outcomes(sink) == {"r1": "completed"}
    assert seen == ["x"]
    assert runtime.sessions["s"].processing is False  # not pinned "processing"
    await consume(stream)  # read late, the events are still there, and it ends once
    assert stream.final_output == "done"
    assert settled(sink) == ["completed"]
    no_violations(sink)


async def test_an_unread_run_that_raises_settles_its_turn_failed(
    runtime: Runtime, sink: MemorySink
) -> None:
    model = ScriptedModel([ModelStep(error=RuntimeError("the model is down"))])
    agent = Agent(name="a", model=model, tools=[])
    stream = StoppableRunner(agent, runtime).run_streamed("go", session="s")
    await wait_settled(sink)
    assert settled(sink) == ["failed"]
    with pytest.raises(RuntimeError, match="the model is down"):
        await consume(stream)
    assert settled(sink) == ["failed"]


@pytest.mark.parametrize("read", [True, False], ids=["read", "unread"])
async def test_a_run_past_its_max_turns_is_failed_read_or_not(
    runtime: Runtime, sink: MemorySink, read: bool
) -> None:
    seen: list[str] = []
    runner = StoppableRunner(read_agent(seen), runtime, classes={"read": "read_only"})
    stream = runner.run_streamed("go", session="s", max_turns=1)  # it needs two
    if read:
        with pytest.raises(MaxTurnsExceeded):
            await consume(stream)
    await wait_settled(sink)
    assert settled(sink) == ["failed"]  # unread, the SDK just ended the run: it was "completed"
    with pytest.raises(MaxTurnsExceeded):
        await consume(stream)  # what its reader is told, whenever it reads
    assert settled(sink) == ["failed"]


async def test_an_unread_run_that_asks_keeps_its_turn_waiting(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target = tmp_path / "f"
    ran: list[str] = []
    runner = StoppableRunner(approval_agent(target, ran), runtime)
    stream = runner.run_streamed("go", session="s")
    await asyncio.wait_for(sink.wait_for(names.PERMISSION_REQUESTED), 10)
    assert settled(sink) == []  # it waits for the user, as a read run does
    await consume(stream)
    assert len(sink.of(names.PERMISSION_REQUESTED)) == 1  # asked once
    state = stream.to_state()
    state.approve(stream.interruptions[0])
    await runner.run(state, session="s")
    assert ran == [str(target)]
    assert settled(sink) == ["completed"]
    no_violations(sink)


async def test_an_unread_run_stopped_by_the_runtime_is_stopped_when_read(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    gate = asyncio.Event()

    @function_tool
    async def wait(path: str) -> str:
        """Wait."""
        await gate.wait()
        return "waited"

    agent = Agent(
        name="a",
        model=ScriptedModel(
            [
                ModelStep(output=[function_call("wait", {"path": "x"}, call_id="w1")]),
                ModelStep(output=[assistant_message("done")]),
            ]
        ),
        tools=[wait],
    )
    runner = StoppableRunner(agent, runtime, classes={"wait": "read_only"})
    stream = runner.run_streamed("go", session="s")
    await asyncio.wait_for(sink.wait_for(names.TOOL_STARTED), 10)
    await runtime.abort("s")
    await wait_settled(sink)
    assert settled(sink) == ["aborted"]
    with pytest.raises(RunStopped):
        await consume(stream)
    assert settled(sink) == ["aborted"]
    no_violations(sink)


async def test_a_run_whose_handler_takes_its_max_turns_is_completed_unread(
    runtime: Runtime, sink: MemorySink
) -> None:
    runner = StoppableRunner(read_agent([]), runtime, classes={"read": "read_only"})
    handlers: Any = {"max_turns": lambda _data: "out of turns"}
    stream = runner.run_streamed("go", session="s", max_turns=1, error_handlers=handlers)
    await wait_settled(sink)
    assert settled(sink) == ["completed"]
    await consume(stream)
    assert stream.final_output == "out of turns"
