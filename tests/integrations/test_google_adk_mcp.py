"""ADK's MCP toolset, native and wrapped: a tool of a real MCP server over stdio
(``turnwatch.testing_mcp``, whose ``deploy`` ignores a cancel, finishes and replies late).

Native, ``abort_signal`` ends the run while the deploy goes on, and ADK seals the call as aborted
although the server went on to finish it. Wrapped, an MCP tool is an ``extension`` call, awaited:
``rt.abort()`` returns once the server replied, and ADK's history holds that reply.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.runners import InMemoryRunner
from google.adk.tools.mcp_tool.mcp_session_manager import StdioConnectionParams
from google.adk.tools.mcp_tool.mcp_toolset import McpToolset
from mcp import StdioServerParameters

from tests.conftest import until
from tests.integrations.adk_parts import (
    HI,
    answers,
    call,
    consume,
    history,
    model,
    new_session,
    says,
    unanswered,
)
from turnwatch import names
from turnwatch.integrations.google_adk import StoppableRunner, TurnwatchPlugin
from turnwatch.runtime import MemorySink, Receipt, Runtime
from turnwatch.testing import check_invariants
from turnwatch.testing_mcp import logged

# ADK 2.13 reads an MCP tool's fields by their MCP SDK 1.x names (inputSchema, outputSchema);
# once fastmcp is imported (pydantic-ai's MCP toolsets, in another test), those names warn.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:Accessing `\w+\.\w+` is deprecated; MCP SDK v2 renamed"
)

DEPLOY_S = 1.5
STEP = says(call("d1", "deploy", seconds=DEPLOY_S))


def toolset(log: Path) -> McpToolset:
    """The server's tools; it appends each cancel's request id to ``log``, and each call's to
    ``log`` + ``.calls``."""
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "turnwatch.testing_mcp", "--log", str(log), "--calls", f"{log}.calls"],
    )
    return McpToolset(connection_params=StdioConnectionParams(server_params=server, timeout=30))


async def closed(tools: McpToolset) -> None:
    await tools.close()


async def stopped(runtime: Runtime, sink: MemorySink, log: Path, step: Any) -> list[Any]:
    """A wrapped run whose model asks for ``step``, stopped once its call reached the server:
    ADK's history after the run's end."""
    tools = toolset(log)
    agent = LlmAgent(name="a", model=model(step), tools=[tools])
    plugin = TurnwatchPlugin(runtime)
    runner = InMemoryRunner(app=App(name="app", root_agent=agent, plugins=[plugin]))
    try:
        sid = await new_session(runner)
        app = StoppableRunner(runner, runtime)
        run = asyncio.ensure_future(
            consume(app.run_async(user_id="u", session_id=sid, new_message=HI))
        )
        started = await sink.wait_for(names.TOOL_STARTED)
        assert started.attrs[names.K_CLASS] == "extension"
        await until(lambda: logged(Path(f"{log}.calls")), what="the call to reach its server")
        assert await runtime.abort(sid) is Receipt.ACCEPTED
        await asyncio.wait_for(run, 10)
        return await history(runner, sid)
    finally:
        await closed(tools)


async def test_native_an_abort_seals_the_mcp_call_aborted_while_the_server_finishes_it(
    tmp_path: Path,
) -> None:
    tools = toolset(tmp_path / "cancels.log")
    agent = LlmAgent(name="a", model=model(STEP), tools=[tools])
    runner = InMemoryRunner(agent=agent, app_name="app")
    try:
        sid = await new_session(runner)
        abort = asyncio.Event()
        events = runner.run_async(user_id="u", session_id=sid, new_message=HI, abort_signal=abort)
        run = asyncio.ensure_future(consume(events))
        await asyncio.sleep(0.5 + 0.3)  # the server started, the deploy under way
        started = time.monotonic()
        abort.set()
        await asyncio.wait_for(run, 10)
        assert time.monotonic() - started < DEPLOY_S  # the run did not wait for the deploy
        said = answers(await history(runner, sid))
        assert said["d1"] == {"error": "Invocation was aborted by client."}
    finally:
        await closed(tools)


async def test_wrapped_an_mcp_call_is_an_extension_call_awaited_to_its_reply(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    log = tmp_path / "cancels.log"
    said = await stopped(runtime, sink, log, STEP)
    assert unanswered(said) == set()
    reply: dict[str, Any] = answers(said)["d1"]
    # The server's real reply, after the stop, which it was told of (the ADR's "awaited after
    # requesting cancellation"): the cancel names the call's own request.
    assert "deploy finished after 1.5s (cancel ignored)" in str(reply)
    assert logged(log) == logged(Path(f"{log}.calls"))
    assert len(logged(log)) == 1
    ended = {str(e.call): e.attrs.get("outcome") for e in sink if e.kind == names.TOOL_FINISHED}
    assert ended == {"d1": "completed_after_stop"}
    kinds = [e.kind for e in sink]
    assert kinds.index(names.TOOL_FINISHED) < kinds.index(names.TURN_SETTLED)
    assert check_invariants(list(sink)) == []


async def test_wrapped_an_error_reply_to_the_cancel_ends_the_call_aborted(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    log = tmp_path / "cancels.log"
    said = await stopped(runtime, sink, log, says(call("d1", "errors_on_cancel", seconds=DEPLOY_S)))
    assert unanswered(said) == set()
    assert "error" in answers(said)["d1"]
    assert logged(log) == logged(Path(f"{log}.calls"))
    ended = {str(e.call): e.attrs.get("outcome") for e in sink if e.kind == names.TOOL_FINISHED}
    assert ended == {"d1": "aborted"}
    assert check_invariants(list(sink)) == []
