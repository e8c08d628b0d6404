"""The Agents SDK's shell tool (``ShellTool`` with a local executor), native and wrapped: the
model's commands are a TERM-ignoring process tree.

Native, the SDK's cancel returns at once and the tree runs on. Wrapped, a shell call is a
turnwatch call: with :func:`shell_executor` a ``process`` call whose commands are contained and
ended within the grace window; with an executor of the application's own, of the class it is
given (``mutating`` unless said: awaited).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from typing import Any

import pytest
from agents import Agent, LocalShellTool, Runner, ShellTool
from agents.testing import ModelStep, ScriptedModel, assistant_message
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseFunctionShellToolCall,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
)
from openai.types.responses.response_function_shell_tool_call import Action
from openai.types.responses.response_output_item import LocalShellCall, LocalShellCallAction

from tests.conftest import until
from tests.integrations.procs import end_marked, marked_alive
from tests.integrations.test_openai_agents import consume
from tests.integrations.verdicts import no_violations, outcomes
from turnwatch import names
from turnwatch.integrations.openai_agents import (
    RunStopped,
    StoppableRunner,
    ToolClassError,
    local_shell_executor,
    shell_executor,
    tool_class,
)
from turnwatch.runtime import MemorySink, Receipt, Runtime
from turnwatch.runtime.tools.proctree import CALL_MARKER

TERM_IGNORING_TREE = "trap '' TERM; (trap '' TERM; sleep 60) & sleep 60; wait"


def shell_call(call_id: str, *commands: str) -> ResponseFunctionShellToolCall:
    return ResponseFunctionShellToolCall(
        id=f"sh_{call_id}",
        call_id=call_id,
        type="shell_call",
        status="completed",
        action=Action(commands=list(commands), max_output_length=None, timeout_ms=None),
    )


def streamed(item: Any) -> ModelStep:
    """A step whose response is ``item``, streamed as the SDK's scripted model streams the
    items it streams itself (a shell call it leaves to the script: its events, built here)."""
    from agents.testing.model import _response_for_step  # the SDK's own, as its streams use

    step = ModelStep(output=[item])
    done = _response_for_step(step, [item])
    begun = done.model_copy(update={"output": [], "status": "in_progress", "usage": None})
    return ModelStep.stream(
        [
            ResponseCreatedEvent(type="response.created", response=begun, sequence_number=0),
            ResponseOutputItemAddedEvent(
                type="response.output_item.added", item=item, output_index=0, sequence_number=1
            ),
            ResponseOutputItemDoneEvent(
                type="response.output_item.done", item=item, output_index=0, sequence_number=2
            ),
            ResponseCompletedEvent(type="response.completed", response=done, sequence_number=3),
        ],
        output=[item],
    )


def shell_agent(tool: ShellTool, *commands: str) -> Agent[Any]:
    """An agent whose model runs ``commands`` in one shell call (``s1``), then is done."""
    model = ScriptedModel(
        [streamed(shell_call("s1", *commands)), ModelStep(output=[assistant_message("done")])]
    )
    return Agent(name="a", model=model, tools=[tool])


def local_shell_agent(tool: LocalShellTool, *argv: str) -> Agent[Any]:
    """An agent whose model runs ``argv`` in one local shell call (``l1``), then is done."""
    item = LocalShellCall(
        id="lsh_l1",
        call_id="l1",
        type="local_shell_call",
        status="completed",
        action=LocalShellCallAction(command=list(argv), env={"GREETING": "hi"}, type="exec"),
    )
    model = ScriptedModel([streamed(item), ModelStep(output=[assistant_message("done")])])
    return Agent(name="a", model=model, tools=[tool])


async def test_native_a_cancelled_run_leaves_the_shells_tree_running() -> None:
    spawned: list[subprocess.Popen[bytes]] = []

    def run(request: Any) -> str:  # an executor as the SDK's docs write one
        env = {**os.environ, CALL_MARKER: "native/s1"}
        for command in request.data.action.commands:
            spawned.append(subprocess.Popen(["bash", "-c", command], env=env))
        return "started"

    result = Runner.run_streamed(shell_agent(ShellTool(executor=run), TERM_IGNORING_TREE), "go")
    reading = asyncio.ensure_future(consume(result))
    try:
        await until(lambda: len(marked_alive("native")) >= 3, what="the tree")
        result.cancel("immediate")
        await reading
        assert len(marked_alive("native")) >= 3  # the tree runs on
    finally:
        end_marked("native", spawned)


@pytest.mark.parametrize("kind", ["ShellTool", "LocalShellTool"])
async def test_wrapped_a_stopped_shell_call_ends_within_its_grace(
    runtime: Runtime, sink: MemorySink, kind: str
) -> None:
    if kind == "ShellTool":
        tool = ShellTool(executor=shell_executor)
        agent, call = shell_agent(tool, "echo begun", TERM_IGNORING_TREE), "s1"
    else:
        local = LocalShellTool(executor=local_shell_executor)
        agent, call = local_shell_agent(local, "bash", "-c", TERM_IGNORING_TREE), "l1"
    run = asyncio.ensure_future(StoppableRunner(agent, runtime).run("go", session="s"))
    started = await asyncio.wait_for(sink.wait_for(names.TOOL_STARTED), 10)
    assert started.attrs[names.K_CLASS] == "process"
    await until(lambda: len(marked_alive("s")) >= 3, what="the tree")
    assert await runtime.abort("s") is Receipt.ACCEPTED
    assert marked_alive("s") == []  # nothing of the call outlived abort()
    with pytest.raises(RunStopped):
        await run
    assert outcomes(sink) == {call: "aborted"}
    no_violations(sink)


async def test_wrapped_shell_executor_gives_each_commands_output_and_exit(
    runtime: Runtime, sink: MemorySink
) -> None:
    agent = shell_agent(ShellTool(executor=shell_executor), "echo one", "echo two >&2; exit 3")
    result = await StoppableRunner(agent, runtime).run("go", session="s")
    assert result.final_output == "done"
    (item,) = [i for i in result.new_items if type(i).__name__ == "ToolCallOutputItem"]
    said = str(item.output)
    assert "one" in said
    assert "two" in said
    assert "3" in said  # the second command's exit code
    assert outcomes(sink) == {"s1": "completed"}
    no_violations(sink)


async def test_wrapped_an_executor_of_the_applications_own_is_awaited(
    runtime: Runtime, sink: MemorySink
) -> None:
    ran: list[str] = []
    gate = asyncio.Event()

    async def run(request: Any) -> str:
        ran.append("began")
        await gate.wait()
        ran.append("ended")
        return "ok"

    agent = shell_agent(ShellTool(executor=run), "make deploy")
    stream = StoppableRunner(agent, runtime).run_streamed("go", session="s")
    started = await asyncio.wait_for(sink.wait_for(names.TOOL_STARTED), 10)
    assert started.attrs[names.K_CLASS] == "mutating"
    stop = asyncio.ensure_future(runtime.abort("s"))
    await asyncio.wait_for(sink.wait_for(names.TOOLS_ABORT_SENT), 10)  # the stop reached it
    assert not stop.done()  # and waits for the executor
    gate.set()
    assert await stop is Receipt.ACCEPTED
    assert ran == ["began", "ended"]
    with pytest.raises(RunStopped):
        await consume(stream)
    assert outcomes(sink) == {"s1": "completed_after_stop"}


def test_a_shell_tool_of_the_applications_own_cannot_be_a_process_tool_unless_async(
    runtime: Runtime,
) -> None:
    def run(request: Any) -> str:
        return ""

    agent = shell_agent(tool_class(ShellTool(executor=run), "process"), "true")
    with pytest.raises(ToolClassError, match="shell"):
        StoppableRunner(agent, runtime)


async def test_wrapped_local_shell_executor_runs_the_argv_with_its_env(
    runtime: Runtime, sink: MemorySink
) -> None:
    tool = LocalShellTool(executor=local_shell_executor)
    agent = local_shell_agent(tool, "bash", "-c", 'echo "$GREETING"; exit 4')
    result = await StoppableRunner(agent, runtime).run("go", session="s")
    (item,) = [i for i in result.new_items if type(i).__name__ == "ToolCallOutputItem"]
    assert str(item.output) == "hi\n\n(exit code 4)"
    assert outcomes(sink) == {"l1": "completed"}
