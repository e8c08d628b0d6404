"""The wrappers under the stops a framework's users actually make: a process tool stopped while it
prepares, a user's own token and capabilities, a run cancelled from outside, nested runs, SDK
handoffs. Both frameworks, real processes; native beside wrapped where the framework has a native
behaviour."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from agents import Agent as SdkAgent
from agents import function_tool
from pydantic_ai import Agent
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models.function import FunctionModel

from tests.conftest import GRACE, turnwatch
from tests.integrations.test_openai_agents import scripted
from tests.integrations.test_pydantic_ai import calls, marked_alive, no_violations, outcomes
from turnwatch import names
from turnwatch.integrations import openai_agents, pydantic_ai
from turnwatch.runtime import FanOut, LocalHost, MemorySink, Receipt, Runtime
from turnwatch.runtime.events import now_event
from turnwatch.testing import check_invariants
from turnwatch.tracing.ledger import Ledger

# --- a process tool stopped before its command: the command never starts ---


def preparing_then(marker: Path, ready: asyncio.Event, run: Any) -> Any:
    """A process tool that prepares until ``ready``, then runs ``touch marker`` with ``run``."""

    async def deploy() -> str:
        """Deploy."""
        await ready.wait()
        done = await run(["touch", str(marker)])
        return str(done.output)

    return deploy


async def stop_while_preparing(rt: Runtime, sink: MemorySink, ready: asyncio.Event) -> None:
    """Stop the session while its tool prepares; let the preparation end right after the tool's
    ``tools.abort`` went out (inside its grace window), then wait for the stop."""
    await sink.wait_for(names.TOOL_REQUESTED)
    stop = asyncio.ensure_future(rt.abort("s"))
    await sink.wait_for(names.TOOLS_ABORT_SENT)
    ready.set()
    assert await stop is Receipt.ACCEPTED


async def test_pydantic_ai_a_process_tool_stopped_before_its_command_never_spawns_it(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    marker, ready = tmp_path / "ran", asyncio.Event()
    agent = Agent(FunctionModel(calls(ToolCallPart("deploy", {}, tool_call_id="d1"))))
    agent.tool_plain(metadata={"turnwatch_class": "process"})(
        preparing_then(marker, ready, pydantic_ai.run_command)
    )
    run = asyncio.ensure_future(pydantic_ai.StoppableAgent(agent, runtime).run("go", session="s"))
    await stop_while_preparing(runtime, sink, ready)
    with pytest.raises(BaseException):  # noqa: B017, PT011 - RunCancelled, the run's own end
        await run
    assert not marker.exists()
    assert outcomes(sink) == {"d1": "aborted"}
    assert marked_alive() == []
    no_violations(sink)


async def test_sdk_a_process_tool_stopped_before_its_command_never_spawns_it(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    marker, ready = tmp_path / "ran", asyncio.Event()
    tool = function_tool(
        preparing_then(marker, ready, openai_agents.run_command), name_override="deploy"
    )
    agent = SdkAgent(
        name="a",
        model=scripted(("deploy", {}, "d1")),
        tools=[openai_agents.tool_class(tool, "process")],
    )
    runner = openai_agents.StoppableRunner(agent, runtime)
    run = asyncio.ensure_future(runner.run("go", session="s"))
    await stop_while_preparing(runtime, sink, ready)
    with pytest.raises(openai_agents.RunStopped):
        await run
    assert not marker.exists()
    assert outcomes(sink) == {"d1": "aborted"}
    no_violations(sink)


def test_the_checker_flags_a_start_after_the_calls_tools_abort() -> None:
    """Any ``tool.started`` (one with a pid above all) after its call's ``tools.abort.sent``
    is a call that started after it was stopped: invariant 2."""

    def ev(kind: str, **attrs: Any) -> Any:
        return now_event(kind, "s", turn="t", call="c", tool="deploy", attrs=attrs)

    events = [
        now_event(names.TURN_STARTED, "s", turn="t"),
        ev(names.TOOL_REQUESTED, **{names.K_CLASS: "process"}),
        ev(names.TOOL_STARTED, **{names.K_CLASS: "process"}),
        ev(names.TOOLS_ABORT_SENT, policy="grace", source="ui"),
        ev(names.TOOL_STARTED, pid=4242, create_time=1.0),
    ]
    assert [v.invariant for v in check_invariants(events)] == [2]
    assert check_invariants(events[:-1]) == []


# --- a process tool that spawns on its own: recorded as started, said to be uncontained ---


async def test_a_process_tool_that_spawns_on_its_own_is_recorded_started_and_uncontained(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    rt = Runtime(LocalHost(), grace_s=GRACE, sink=FanOut(ledger, sink := MemorySink()))
    agent = Agent(FunctionModel(calls(ToolCallPart("build", {}, tool_call_id="b1"))))

    @agent.tool_plain(metadata={"turnwatch_class": "process"})
    async def build() -> str:
        proc = await asyncio.create_subprocess_exec("true")  # not through run_command
        return str(await proc.wait())

    await pydantic_ai.StoppableAgent(agent, rt).run("go", session="s")
    started = [e for e in sink if e.kind == names.TOOL_STARTED]
    assert [(e.call, e.attrs.get("pid")) for e in started] == [("b1", None)]
    ledger.close()
    shown = turnwatch("explain", "s", "--ledger", str(path), env={**os.environ, "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert "b1 (process) ran uncontained" in " ".join(shown.stdout.split())


def test_a_sync_process_tool_is_refused_by_both_wrappers(runtime: Runtime) -> None:
    """One rule: a process tool is async and starts its commands with run_command."""

    def sh() -> str:
        """Run a command."""
        return "done"

    agent = Agent(FunctionModel(calls()))
    agent.tool_plain(metadata={"turnwatch_class": "process"})(sh)
    with pytest.raises(pydantic_ai.ToolClassError, match="'sh': a process tool must be async"):
        pydantic_ai.StoppableAgent(agent, runtime)
    sdk = SdkAgent(name="a", tools=[openai_agents.tool_class(function_tool(sh), "process")])
    with pytest.raises(openai_agents.ToolClassError, match="'sh': a process tool must be async"):
        openai_agents.StoppableRunner(sdk, runtime)
