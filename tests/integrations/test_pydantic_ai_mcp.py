"""pydantic-ai's MCP toolsets, native and wrapped: a tool of a real MCP server over stdio.

The server is ``turnwatch.testing_mcp``, whose ``deploy`` ignores a cancel and finishes. Native, a
stop through the framework's token ends the run at once while the deploy goes on; wrapped, the
MCP tool is an ``extension`` call, awaited: ``rt.abort()`` returns once the server replied.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent, CancellationToken
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models.function import FunctionModel

from tests.conftest import until
from tests.integrations.test_pydantic_ai import calls, no_violations, outcomes
from turnwatch import names
from turnwatch.integrations.pydantic_ai import StoppableAgent
from turnwatch.runtime import MemorySink, Receipt, Runtime

DEPLOY_S = 1.5


def deploying_agent(log: Path, under_way: asyncio.Event | None = None) -> Agent[None, str]:
    """An agent whose model calls the server's ``deploy`` once (it takes DEPLOY_S); ``under_way``
    is set when the deploy reports its first step."""
    server = StdioTransport(
        command=sys.executable, args=["-m", "turnwatch.testing_mcp", "--log", str(log)]
    )

    async def reported(progress: float, total: float | None, message: str | None) -> None:
        if under_way is not None:
            under_way.set()

    model = FunctionModel(calls(ToolCallPart("deploy", {"seconds": DEPLOY_S}, "d1")))
    return Agent(model, toolsets=[MCPToolset(server, progress_handler=reported)])


async def test_native_a_stop_returns_while_the_mcp_call_runs_on(tmp_path: Path) -> None:
    log, under_way = tmp_path / "cancels.log", asyncio.Event()
    agent = deploying_agent(log, under_way)
    async with agent:  # the server runs for the test, not only for the run
        token = CancellationToken()
        run = asyncio.ensure_future(agent.run("go", cancellation_token=token))
        await asyncio.wait_for(under_way.wait(), 10)  # the deploy (DEPLOY_S) has begun
        t0 = time.monotonic()
        token.cancel()
        with pytest.raises(RunCancelled):
            await run
        stopped_after = time.monotonic() - t0
        # The server was told (notifications/cancelled); its deploy ignores that and goes on.
        await until(lambda: log.exists() and log.read_text().strip(), what="the server's cancel")
    # The run ended long before the deploy could have: the stop did not wait for it.
    assert stopped_after < DEPLOY_S / 2


async def test_wrapped_an_mcp_call_is_an_extension_call_awaited_to_its_reply(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    rt = runtime
    log = tmp_path / "cancels.log"
    agent = deploying_agent(log)
    async with agent:
        run = asyncio.ensure_future(StoppableAgent(agent, rt).run("go", session="s"))
        await until(
            lambda: any(e.kind == names.TOOL_STARTED for e in sink), what="the deploy to start"
        )
        started = next(e for e in sink if e.kind == names.TOOL_STARTED)
        assert started.attrs[names.K_CLASS] == "extension"
        t0 = time.monotonic()
        assert await rt.abort("s") is Receipt.ACCEPTED
        awaited = time.monotonic() - t0
        with pytest.raises(RunCancelled):
            await run
    # Settled only once the server had replied; its deploy was never cancelled under it.
    kinds = [e.kind for e in sink]
    assert kinds.index(names.TOOL_FINISHED) < kinds.index(names.TURN_SETTLED)
    assert outcomes(sink) == {"d1": "completed_after_stop"}
    assert awaited > DEPLOY_S / 3
    assert not log.exists()  # no cancel was sent under the deploy
    no_violations(sink)
