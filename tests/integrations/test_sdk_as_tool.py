"""The SDK's agents used ``as_tool``: the nested run's tools are calls of the run, under the same
stop. Real processes and files; the SDK's own ``ScriptedModel``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.run import get_default_agent_runner, set_default_agent_runner
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from tests.conftest import until
from tests.integrations.pai_parts import CHUNK, CHUNKS, begun, marked_alive, wait_forever
from tests.integrations.test_openai_agents import scripted
from tests.integrations.test_wrapper_edges import sdk_writer, sh_tool
from tests.integrations.verdicts import no_violations, outcomes
from turnwatch import names
from turnwatch.integrations import openai_agents
from turnwatch.integrations.openai_agents.nesting import NestingRunner
from turnwatch.runtime import MemorySink, Receipt, Runtime


@pytest.fixture(autouse=True)
def sdk_default_runner() -> Iterator[None]:
    """Each test starts from the SDK's own default runner (the wrapper installs its own again at
    the first agent-tool call) and leaves it so."""
    before = get_default_agent_runner()
    set_default_agent_runner(None)
    yield
    set_default_agent_runner(before)


def parent_of(tool: Any, call: str = "w1") -> Agent[Any]:
    """An agent whose model calls ``tool`` once (call ``call``), then says it is done."""
    return Agent(name="lead", model=scripted((tool.name, {"input": "go"}, call)), tools=[tool])


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "on_stream"])
async def test_an_agent_tools_calls_are_the_runs_and_a_stopped_write_is_awaited(
    runtime: Runtime, sink: MemorySink, tmp_path: Path, streamed: bool
) -> None:
    target = tmp_path / "big"
    seen: list[Any] = []
    writer = sdk_writer("writer", target)  # its model's call is w1, as the parent's
    tool = writer.as_tool("writer", "writes", on_stream=seen.append if streamed else None)
    run = asyncio.ensure_future(
        openai_agents.StoppableRunner(parent_of(tool), runtime).run("go", session="s")
    )
    await until(lambda: begun(target), what="the nested agent's write to begin")
    assert await runtime.abort("s") is Receipt.ACCEPTED
    assert target.stat().st_size == CHUNKS * len(CHUNK)  # awaited whole, by the walk
    with pytest.raises(openai_agents.RunStopped):
        await run
    # The nested call is the run's, its id qualified by the agent-tool call's: never confused
    # with the parent's call of the same id.
    assert outcomes(sink) == {"w1": "completed_after_stop", "w1/w1": "completed_after_stop"}
    walk = next(e for e in sink if e.kind == names.ABORT_WALK_STARTED)
    assert walk.attrs[names.K_INFLIGHT] == 2
    assert {e.session for e in sink if e.call is not None} == {"s"}
    assert streamed is bool(seen)  # the agent tool's own options still hold
    no_violations(sink)


async def test_an_agent_tools_process_call_ends_within_its_grace(
    runtime: Runtime, sink: MemorySink
) -> None:
    sh = openai_agents.tool_class(
        function_tool(sh_tool(openai_agents.run_command), name_override="sh"), "process"
    )
    inner = Agent(name="ops", model=scripted(("sh", {}, "i1")), tools=[sh])
    run = asyncio.ensure_future(
        openai_agents.StoppableRunner(parent_of(inner.as_tool("ops", "runs")), runtime).run(
            "go", session="s"
        )
    )
    await until(lambda: len(marked_alive()) >= 3, what="the nested agent's tree to start")
    assert await runtime.abort("s") is Receipt.ACCEPTED
    assert marked_alive() == []  # the TERM-ignoring tree, killed after the grace window
    with pytest.raises(openai_agents.RunStopped):
        await run
    assert outcomes(sink)["w1/i1"] == "aborted"
    no_violations(sink)


async def test_the_stop_cancels_the_nested_run_whose_model_asks_nothing_more(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    marker = tmp_path / "touched"

    async def touch() -> str:
        """Touch the marker."""
        marker.touch()
        return "touched"

    inner = Agent(
        name="reader",
        model=ScriptedModel(
            [
                ModelStep(output=[function_call("wait", {}, call_id="r1")]),
                ModelStep(output=[function_call("touch", {}, call_id="t1")]),
                ModelStep(output=[assistant_message("done")]),
            ]
        ),
        tools=[function_tool(wait_forever, name_override="wait"), function_tool(touch)],
    )
    runner = openai_agents.StoppableRunner(
        parent_of(inner.as_tool("reader", "reads")),
        runtime,
        classes={"wait": "read_only", "touch": "mutating"},  # the nested agent's tools
    )
    run = asyncio.ensure_future(runner.run("go", session="s"))
    await until(
        lambda: any(e.kind == names.TOOL_STARTED and e.call == "w1/r1" for e in sink),
        what="the nested read to start",
    )
    assert await runtime.abort("s") is Receipt.ACCEPTED
    with pytest.raises(openai_agents.RunStopped):
        await run
    assert outcomes(sink)["w1/r1"] == "discarded"
    assert not marker.exists()
    # Not even refused: the nested run was cancelled with its parent, and its model never asked.
    assert all(e.call != "w1/t1" for e in sink)
    no_violations(sink)


async def test_an_agent_tool_outside_a_wrapped_run_is_the_sdk_s(tmp_path: Path) -> None:
    target = tmp_path / "big"
    writer = sdk_writer("writer", target)
    parent = parent_of(writer.as_tool("writer", "writes"))
    NestingRunner.install()  # as a wrapped run elsewhere in the process leaves it
    result = await Runner.run(parent, "go")
    assert result.final_output == "done"
    assert target.stat().st_size == CHUNKS * len(CHUNK)
