"""pydantic-ai's MCP toolsets, native and wrapped: a tool of a real MCP server over stdio.

The server is ``turnwatch.testing_mcp``, whose ``deploy`` ignores a cancel and finishes. Native, a
stop through the framework's token ends the run at once while the deploy goes on; wrapped, the
MCP tool is an ``extension`` call, awaited: ``rt.abort()`` returns once the server replied.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent, CancellationToken
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models.function import FunctionModel

from tests.conftest import until
from tests.integrations.pai_parts import calls
from tests.integrations.verdicts import no_violations, outcomes
from turnwatch import names
from turnwatch.integrations.pydantic_ai import StoppableAgent
from turnwatch.runtime import MemorySink, Receipt, Runtime
from turnwatch.testing_mcp import logged

DEPLOY_S = 1.5


class Reports:
    """The deploy's progress reports, as the client received them (step, of steps)."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float | None]] = []
        self.under_way = asyncio.Event()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total))
        self.under_way.set()

    @property
    def at_last_step(self) -> bool:
        return bool(self.seen) and self.seen[-1][0] == self.seen[-1][1]


def deploying_agent(log: Path, reports: Reports, tool: str = "deploy") -> Agent[None, str]:
    """An agent whose model calls the server's ``tool`` once (``deploy`` takes DEPLOY_S,
    reporting each of its steps to ``reports``). The server appends each cancel's request id to
    ``log``, and each call's to ``log`` + ``.calls``."""
    server = StdioTransport(
        command=sys.executable,
        args=["-m", "turnwatch.testing_mcp", "--log", str(log), "--calls", f"{log}.calls"],
    )
    model = FunctionModel(calls(ToolCallPart(tool, {"seconds": DEPLOY_S}, "d1")))
    return Agent(model, toolsets=[MCPToolset(server, progress_handler=reports)])


async def test_native_a_stop_returns_while_the_mcp_call_runs_on(tmp_path: Path) -> None:
    log, reports = tmp_path / "cancels.log", Reports()
    agent = deploying_agent(log, reports)
    async with agent:  # the server runs for the test, not only for the run
        token = CancellationToken()
        run = asyncio.ensure_future(agent.run("go", cancellation_token=token))
        await asyncio.wait_for(reports.under_way.wait(), 10)  # the deploy has begun
        token.cancel()
        with pytest.raises(RunCancelled):
            await run
        # The run ended while the deploy was still under way: the stop did not wait for it.
        assert not reports.at_last_step
        # The server was told (notifications/cancelled); its deploy ignores that and goes on.
        await until(lambda: log.exists() and log.read_text().strip(), what="the server's cancel")


async def test_wrapped_an_mcp_call_is_an_extension_call_awaited_to_its_reply(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    rt = runtime
    log, reports = tmp_path / "cancels.log", Reports()
    agent = deploying_agent(log, reports)
    async with agent:
        run = asyncio.ensure_future(StoppableAgent(agent, rt).run("go", session="s"))
        started = await sink.wait_for(names.TOOL_STARTED)
        assert started.attrs[names.K_CLASS] == "extension"
        await until(lambda: logged(Path(f"{log}.calls")), what="the call to be sent")
        assert await rt.abort("s") is Receipt.ACCEPTED
        # abort() returned only once the deploy had gone through its last step and replied.
        assert reports.at_last_step
        with pytest.raises(RunCancelled):
            await run
    # Settled only once the server had replied, after it was told of the stop (the ADR's
    # "awaited after requesting cancellation"): the cancel names the call's own request.
    kinds = [e.kind for e in sink]
    assert kinds.index(names.TOOL_FINISHED) < kinds.index(names.TURN_SETTLED)
    assert outcomes(sink) == {"d1": "completed_after_stop"}
    assert logged(log) == logged(Path(f"{log}.calls"))
    assert len(logged(log)) == 1
    no_violations(sink)


async def test_wrapped_an_error_reply_to_the_cancel_ends_the_call_aborted(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    log = tmp_path / "cancels.log"
    agent = deploying_agent(log, Reports(), tool="errors_on_cancel")
    async with agent:
        run = asyncio.ensure_future(StoppableAgent(agent, runtime).run("go", session="s"))
        await sink.wait_for(names.TOOL_STARTED)
        await until(lambda: logged(Path(f"{log}.calls")), what="the call to be sent")
        assert await runtime.abort("s") is Receipt.ACCEPTED
        with pytest.raises(RunCancelled):
            await run
    assert outcomes(sink) == {"d1": "aborted"}
    (finished,) = sink.of(names.TOOL_FINISHED)
    assert "Request cancelled" in str(finished.attrs.get(names.K_ERROR))
    assert logged(log) == logged(Path(f"{log}.calls"))
    no_violations(sink)


async def test_wrapped_a_call_stopped_before_its_request_went_out_never_sends_it(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    """The toolset's own hook (``process_tool_call``) holds the call until the stop's walk
    began: the request it then sends would be a call started after the stop."""
    log = tmp_path / "cancels.log"
    server = StdioTransport(
        command=sys.executable,
        args=["-m", "turnwatch.testing_mcp", "--log", str(log), "--calls", f"{log}.calls"],
    )

    async def after_the_stop(ctx: Any, call_tool: Any, name: str, args: dict[str, Any]) -> Any:
        await sink.wait_for(names.ABORT_WALK_STARTED)
        return await call_tool(name, args)

    model = FunctionModel(calls(ToolCallPart("deploy", {"seconds": DEPLOY_S}, "d1")))
    agent = Agent(model, toolsets=[MCPToolset(server, process_tool_call=after_the_stop)])
    async with agent:
        run = asyncio.ensure_future(StoppableAgent(agent, runtime).run("go", session="s"))
        await sink.wait_for(names.TOOL_STARTED)
        assert await runtime.abort("s") is Receipt.ACCEPTED
        with pytest.raises(RunCancelled):
            await run
        # No wait: a request sent would have been awaited to its reply before the run ended.
    assert logged(Path(f"{log}.calls")) == []
    assert outcomes(sink) == {"d1": "aborted"}
    no_violations(sink)
