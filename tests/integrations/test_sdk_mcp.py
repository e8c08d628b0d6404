"""The Agents SDK's MCP servers (``Agent(mcp_servers=[...])``), native and wrapped: a tool of a
real MCP server over stdio (``turnwatch.testing_mcp``, whose ``deploy`` ignores a cancel and
finishes).

The SDK builds an MCP server's tools at run time, so a wrapper that wraps the agent's tools once
never saw them: the stop reported the turn settled while the deploy ran on (invariant 1).
Wrapped, each is an ``extension`` call, awaited: ``rt.abort()`` returns once the server replied.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner
from agents.mcp import MCPServerStdio

from tests.conftest import until
from tests.integrations.test_openai_agents import consume, scripted
from tests.integrations.test_pydantic_ai import no_violations, outcomes
from turnwatch import names
from turnwatch.integrations.openai_agents import RunStopped, StoppableRunner, ToolClassError
from turnwatch.runtime import MemorySink, Receipt, Runtime

DEPLOY_S = 1.5


def deploying(tmp_path: Path, *, seconds: float = DEPLOY_S) -> tuple[Agent[Any], MCPServerStdio]:
    """An agent whose model calls the server's ``deploy`` once (call ``d1``), and the server;
    the server appends each call's id to ``calls`` and each cancel's to ``cancels``."""
    server = MCPServerStdio(
        params={
            "command": sys.executable,
            "args": [
                "-m",
                "turnwatch.testing_mcp",
                "--log",
                str(tmp_path / "cancels"),
                "--calls",
                str(tmp_path / "calls"),
            ],
        },
        name="ops",
        client_session_timeout_seconds=30,
    )
    agent = Agent(
        name="a", model=scripted(("deploy", {"seconds": seconds}, "d1")), mcp_servers=[server]
    )
    return agent, server


def begun(tmp_path: Path) -> bool:
    calls = tmp_path / "calls"
    return calls.exists() and bool(calls.read_text().strip())


async def test_native_a_cancel_returns_while_the_mcp_call_runs_on(tmp_path: Path) -> None:
    agent, server = deploying(tmp_path)
    async with server:
        result = Runner.run_streamed(agent, "go")
        reading = asyncio.ensure_future(consume(result))
        await until(lambda: begun(tmp_path), what="the deploy to begin")
        began = time.monotonic()
        result.cancel("immediate")
        await reading
        assert time.monotonic() - began < DEPLOY_S / 2  # it did not wait for the deploy


async def test_wrapped_an_mcp_call_is_an_extension_call_awaited_to_its_reply(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    agent, server = deploying(tmp_path)
    async with server:
        run = asyncio.ensure_future(StoppableRunner(agent, runtime).run("go", session="s"))
        started = await asyncio.wait_for(sink.wait_for(names.TOOL_STARTED), 20)
        assert started.attrs[names.K_CLASS] == "extension"
        await until(lambda: begun(tmp_path), what="the deploy to begin")
        assert await runtime.abort("s") is Receipt.ACCEPTED
        with pytest.raises(RunStopped):
            await run
    kinds = [e.kind for e in sink]
    assert kinds.index(names.TOOL_FINISHED) < kinds.index(names.TURN_SETTLED)
    assert outcomes(sink) == {"d1": "completed_after_stop"}
    no_violations(sink)


async def test_wrapped_an_mcp_call_before_any_stop_returns_the_servers_reply(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    agent, server = deploying(tmp_path, seconds=0.1)
    async with server:
        result = await StoppableRunner(agent, runtime).run("go", session="s")
    assert result.final_output == "done"
    assert outcomes(sink) == {"d1": "completed"}
    replies = [str(i.output) for i in result.new_items if type(i).__name__ == "ToolCallOutputItem"]
    (reply,) = replies
    assert "deploy finished" in reply
    no_violations(sink)


async def test_classes_may_name_an_mcp_servers_tool(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    agent, server = deploying(tmp_path, seconds=0.1)
    runner = StoppableRunner(agent, runtime, classes={"deploy": "mutating"})
    async with server:
        await runner.run("go", session="s")
    started = sink.of(names.TOOL_STARTED)
    assert [e.attrs[names.K_CLASS] for e in started] == ["mutating"]


def test_an_mcp_servers_tool_cannot_be_a_process_tool(runtime: Runtime, tmp_path: Path) -> None:
    agent, _server = deploying(tmp_path)
    with pytest.raises(ToolClassError, match="deploy"):
        StoppableRunner(agent, runtime, classes={"deploy": "process"})
    with pytest.raises(ToolClassError, match="nope"):
        StoppableRunner(agent.clone(mcp_servers=[]), runtime, classes={"nope": "mutating"})
