"""A wrapped framework's runs leave nothing of theirs in the runtime.

The runtime keeps every session's calls (receipts, late answers); each call's execution is the
framework's handler, which holds the framework's run context (its whole message history) and the
tool's return value. Kept with the call, a long-lived runtime would grow by a run's context per
tool call, for good. Counted on real runs: the framework's contexts alive after two runs and
after six are as many.

A run that paused for approvals keeps its turn live until it is resumed; a user who clicks Stop
and never comes back left the wrapper holding that turn (its calls, its results) and a slot per
prompt, for the runtime's life, after the runtime itself had let the session go.
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Agent as SdkAgent
from agents import RunContextWrapper, function_tool, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import RunContext

from turnwatch.integrations.openai_agents import StoppableRunner, tool_class
from turnwatch.integrations.pydantic_ai import StoppableAgent
from turnwatch.runtime import LocalHost, Runtime, Turn

CALLS = 5

set_tracing_disabled(True)  # the SDK's own tracing would try to export to its platform


def alive(kind: type, mine: Callable[[Any], bool]) -> int:
    gc.collect()
    return sum(isinstance(o, kind) and mine(o) for o in gc.get_objects())


async def grows(
    run: Callable[[int], Awaitable[Any]],
    kind: type,
    mine: Callable[[Any], bool] = lambda _o: True,
) -> tuple[int, int]:
    """The ``kind`` objects alive after two runs and after six; ``mine``: those of the test's
    own (the whole suite runs in one process, and another test's runtime may still hold its
    own for a while: a daemon thread it left)."""
    for i in range(2):
        await run(i)
    two = alive(kind, mine)
    for i in range(2, 6):
        await run(i)
    return two, alive(kind, mine)


def turns_of(rt: Runtime) -> Callable[[Any], bool]:
    """A turn of ``rt``'s, not another runtime's."""
    return lambda turn: turn.session.env is rt.env


def _asks(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if len(messages) == 1:
        return ModelResponse(
            parts=[  # read-only ones run in place, mutating ones in a task of the runtime's
                ToolCallPart("read" if i % 2 else "write", {}, tool_call_id=f"c{i}")
                for i in range(CALLS)
            ]
        )
    return ModelResponse(parts=[TextPart("done")])


async def test_pydantic_ai_runs_leave_no_run_context_behind() -> None:
    agent = Agent(FunctionModel(_asks))

    @agent.tool_plain(metadata={"turnwatch_class": "read_only"})
    async def read() -> str:
        return "text"

    @agent.tool_plain(metadata={"turnwatch_class": "mutating"})
    async def write() -> str:
        return "written"

    wrapped = StoppableAgent(agent, Runtime(LocalHost(subreaper=False)))
    two, six = await grows(lambda i: wrapped.run("go", session=f"s{i}"), RunContext)
    assert six == two  # before: more with every run


async def test_agents_sdk_runs_leave_no_run_context_behind() -> None:
    @function_tool
    async def read() -> str:
        """Read."""
        return "text"

    tool = tool_class(read, "read_only")
    runner_rt = Runtime(LocalHost(subreaper=False))

    async def run(i: int) -> Any:
        asks = [function_call("read", {}, call_id=f"c{n}") for n in range(CALLS)]
        done = [assistant_message("done")]
        model = ScriptedModel([ModelStep(output=asks), ModelStep(output=done)])
        agent = SdkAgent(name="a", model=model, tools=[tool])
        return await StoppableRunner(agent, runner_rt).run("go", session=f"s{i}")

    two, six = await grows(run, RunContextWrapper)
    assert six == two


def _approval(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("delete", {}, tool_call_id="a1")])
    return ModelResponse(parts=[TextPart("ok")])


async def test_a_pydantic_ai_run_stopped_at_its_approvals_leaves_nothing_behind() -> None:
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(_approval), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def delete() -> str:
        return "deleted"

    rt = Runtime(LocalHost(subreaper=False), retain_settled_s=0.0)
    wrapped = StoppableAgent(agent, rt)

    async def run(i: int) -> None:
        first = await wrapped.run("go", session=f"s{i}")
        assert isinstance(first.output, DeferredToolRequests)
        await rt.abort(f"s{i}")  # and the user never comes back

    two, six = await grows(run, Turn, turns_of(rt))
    assert six == two  # before: one turn more per session, held by the wrapper
    assert rt.sessions == {}  # the runtime let them go
    assert wrapped.dispatch.slots == {}


async def test_an_agents_sdk_run_stopped_at_its_approvals_leaves_nothing_behind() -> None:
    @function_tool(needs_approval=True)
    def write() -> str:
        """Write."""
        return "written"

    rt = Runtime(LocalHost(subreaper=False), retain_settled_s=0.0)
    runners: list[StoppableRunner] = []

    async def run(i: int) -> None:
        asks = [function_call("write", {}, call_id="w1")]
        model = ScriptedModel([ModelStep(output=asks), ModelStep(output=[assistant_message("")])])
        runner = (
            runners[0]
            if runners
            else StoppableRunner(SdkAgent(name="a", model=model, tools=[write]), rt)
        )
        runners[:] = [runner]
        runner.agent.model = model
        result = await runner.run("go", session=f"s{i}")
        assert result.interruptions
        await rt.abort(f"s{i}")

    two, six = await grows(run, Turn, turns_of(rt))
    assert six == two
    assert rt.sessions == {}
    assert runners[0].dispatch.slots == {}
