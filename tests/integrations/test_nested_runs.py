"""Nested wrapped runs: a run a tool of another wrapped run starts is a child session, stopped
first by its parent's stop; one asked for after that stop began never starts. Both frameworks
inside a pydantic-ai run, real processes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from agents import Agent as SdkAgent
from agents import function_tool
from pydantic_ai import Agent
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models.function import FunctionModel

from tests.conftest import GRACE, turnwatch, until
from tests.integrations.pai_parts import calls, marked_alive
from tests.integrations.test_openai_agents import scripted
from tests.integrations.test_wrapper_edges import sh_tool, stop_sources
from tests.integrations.verdicts import no_violations, outcomes
from turnwatch import names
from turnwatch.integrations import openai_agents, pydantic_ai
from turnwatch.runtime import FanOut, LocalHost, MemorySink, Receipt, Runtime
from turnwatch.tracing.ledger import Ledger


def inner_run(inner: str, rt: Runtime) -> Any:
    """A wrapped run of ``inner``'s framework whose model asks for one TERM-ignoring process
    tree (call ``i1``)."""
    if inner == "pydantic_ai":
        agent = Agent(FunctionModel(calls(ToolCallPart("sh", {}, tool_call_id="i1"))))
        agent.tool_plain(metadata={"turnwatch_class": "process"})(sh_tool(pydantic_ai.run_command))
        return pydantic_ai.StoppableAgent(agent, rt)
    tool = openai_agents.tool_class(
        function_tool(sh_tool(openai_agents.run_command), name_override="sh"), "process"
    )
    sdk = SdkAgent(name="a", model=scripted(("sh", {}, "i1")), tools=[tool])
    return openai_agents.StoppableRunner(sdk, rt)


def delegating(child: Any, before: asyncio.Event | None = None) -> Agent[Any, Any]:
    """A pydantic-ai agent whose model calls ``delegate`` (``o1``, mutating: a stop awaits it),
    which runs ``child`` in session ``inner`` (after ``before`` is set, if given)."""
    outer = Agent(FunctionModel(calls(ToolCallPart("delegate", {}, tool_call_id="o1"))))

    @outer.tool_plain
    async def delegate() -> str:
        if before is not None:
            await before.wait()  # work of its own first
        return str(await child.run("go", session="inner"))

    return outer


@pytest.mark.parametrize("inner", ["pydantic_ai", "openai_agents"])
async def test_a_nested_runs_session_is_its_parents_child_and_stopped_first(
    tmp_path: Path, inner: str
) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    rt = Runtime(LocalHost(), grace_s=GRACE, sink=FanOut(ledger, sink := MemorySink()))
    outer = delegating(inner_run(inner, rt))
    run = asyncio.ensure_future(pydantic_ai.StoppableAgent(outer, rt).run("go", session="outer"))
    await until(lambda: len(marked_alive()) >= 3, what="the inner run's tree to start")
    assert await rt.abort("outer") is Receipt.ACCEPTED
    assert marked_alive() == []  # the inner run's process call ended within its grace window
    with pytest.raises(RunCancelled):
        await run
    starts = [e for e in sink if e.kind in (names.RUNTIME_STARTED, names.TURN_STARTED)]
    assert {e.session: e.attrs.get(names.K_PARENT_SESSION) for e in starts} == {
        "outer": None,
        "inner": "outer",
    }
    assert [e.session for e in sink if e.kind == names.TURN_SETTLED] == ["inner", "outer"]
    assert stop_sources(sink) == ["ui", "ui"]  # the parent's stop, then its child's
    assert outcomes(sink)["i1"] == "aborted"
    no_violations(sink)
    ledger.close()
    env = {**os.environ, "COLUMNS": "200"}
    shown = " ".join(turnwatch("explain", "inner", "--ledger", str(path), env=env).stdout.split())
    assert "nested run of session outer" in shown
    shown = " ".join(turnwatch("explain", "outer", "--ledger", str(path), env=env).stdout.split())
    assert "nested runs: inner" in shown


@pytest.mark.parametrize("inner", ["pydantic_ai", "openai_agents"])
async def test_a_nested_run_asked_for_after_its_parents_stop_never_starts(inner: str) -> None:
    """The tool that delegates is awaited by the stop; it asks for the nested run only after
    the stop began. Before, the run started unstopped: its process tree ran and the parent's
    stop waited for it, the session pinned "processing" for as long as the tree lived."""
    rt = Runtime(LocalHost(), grace_s=GRACE, sink=(sink := MemorySink()))
    stop_came = asyncio.Event()
    outer = delegating(inner_run(inner, rt), before=stop_came)
    run = asyncio.ensure_future(pydantic_ai.StoppableAgent(outer, rt).run("go", session="outer"))
    await until(
        lambda: any(e.kind == names.TOOL_STARTED and e.call == "o1" for e in sink),
        what="the delegating tool to start",
    )
    stop = asyncio.ensure_future(rt.abort("outer"))
    await sink.wait_for(names.TOOLS_ABORT_SENT)
    stop_came.set()
    assert await asyncio.wait_for(stop, 10 * GRACE) is Receipt.ACCEPTED
    with pytest.raises(RunCancelled):
        await run
    assert marked_alive() == []
    assert not [e for e in sink if e.session == "inner"], "nothing of the nested run"
    assert outcomes(sink) == {"o1": "failed"}
    error = next(e for e in sink if e.kind == names.TOOL_FINISHED).attrs[names.K_ERROR]
    assert "ParentStoppedError" in error
    assert "never starts" in error
    no_violations(sink)
