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
from tests.integrations.test_openai_agents import (
    approved_after_the_stop,
    approved_in_time,
    consume,
    scripted,
)
from tests.integrations.verdicts import no_violations, outcomes
from turnwatch import names
from turnwatch.integrations.openai_agents import RunStopped, StoppableRunner, ToolClassError
from turnwatch.runtime import MemorySink, Receipt, Runtime
from turnwatch.testing_mcp import logged

DEPLOY_S = 1.5


def deploying(
    tmp_path: Path,
    *,
    seconds: float = DEPLOY_S,
    tool: str = "deploy",
    retries: int = 0,
    approval: Any = None,
) -> tuple[Agent[Any], MCPServerStdio]:
    """An agent whose model calls the server's ``tool`` once (call ``d1``), and the server
    (which retries a failed call ``retries`` times, and asks ``approval`` of its calls as the
    SDK's ``require_approval``); the server appends each request's id to ``calls`` and each
    cancel's to ``cancels``."""
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
        max_retry_attempts=retries,
        retry_backoff_seconds_base=0.05,
        require_approval=approval,
    )
    agent = Agent(
        name="a", model=scripted((tool, {"seconds": seconds}, "d1")), mcp_servers=[server]
    )
    return agent, server


def begun(tmp_path: Path) -> bool:
    return bool(logged(tmp_path / "calls"))


async def stopped(runtime: Runtime, tmp_path: Path, **kw: Any) -> None:
    """A wrapped run of :func:`deploying`'s agent (``kw``), stopped once the call began, to its
    end: the run raises RunStopped."""
    agent, server = deploying(tmp_path, **kw)
    async with server:
        run = asyncio.ensure_future(StoppableRunner(agent, runtime).run("go", session="s"))
        await until(lambda: begun(tmp_path), what="the call to begin")
        assert await runtime.abort("s") is Receipt.ACCEPTED
        with pytest.raises(RunStopped):
            await run


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


async def test_wrapped_the_stop_cancels_the_call_at_its_server_and_awaits_the_reply(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    """The ADR: an MCP call is awaited *after requesting cancellation*. The wrapper used to
    await it without a word to the server, which ran the call on unasked."""
    await stopped(runtime, tmp_path)
    (request,) = logged(tmp_path / "calls")
    assert logged(tmp_path / "cancels") == [request]  # the cancel names the call's own request
    assert outcomes(sink) == {"d1": "completed_after_stop"}  # deploy ignores it, finishes
    no_violations(sink)


async def test_wrapped_an_error_reply_to_the_cancel_is_the_calls_end(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    await stopped(runtime, tmp_path, tool="errors_on_cancel")
    assert logged(tmp_path / "cancels") == logged(tmp_path / "calls")
    assert outcomes(sink) == {"d1": "aborted"}
    (finished,) = sink.of(names.TOOL_FINISHED)
    assert "Request cancelled" in str(finished.attrs.get(names.K_ERROR))
    no_violations(sink)


async def test_wrapped_a_stopped_call_is_never_sent_again(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    """The SDK retries a call whose server answered with an error (``max_retry_attempts``):
    after the stop, the server's answer to the cancel is such an error, and each retry would
    be a new call the stop never saw."""
    await stopped(runtime, tmp_path, tool="errors_on_cancel", retries=3)
    # No wait: the call (awaited) ended only after the SDK's last retry had its answer, and a
    # retry sent would have been logged by the server before it answered.
    assert len(logged(tmp_path / "calls")) == 1
    assert outcomes(sink) == {"d1": "aborted"}
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


async def test_wrapped_a_read_only_mcp_call_is_discarded_and_its_server_told(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    agent, server = deploying(tmp_path, seconds=30)
    runner = StoppableRunner(agent, runtime, classes={"deploy": "read_only"})
    async with server:
        run = asyncio.ensure_future(runner.run("go", session="s"))
        await until(lambda: begun(tmp_path), what="the call to begin")
        began = time.monotonic()
        assert await runtime.abort("s") is Receipt.ACCEPTED
        with pytest.raises(RunStopped):
            await run
        assert time.monotonic() - began < 5  # not the deploy's 30 s
        (request,) = logged(tmp_path / "calls")
        await until(lambda: request in logged(tmp_path / "cancels"), what="the server told")
    assert outcomes(sink) == {"d1": "discarded"}
    no_violations(sink)


async def test_wrapped_a_stop_cancels_each_call_by_its_own_request_and_no_other_sessions(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    """Two calls of one turn in flight, and a call of another session on the same server (one
    connection, one session of the SDK's): the stop of the first session cancels its two calls,
    each by its own request, and nothing of the other session's."""
    server = MCPServerStdio(
        params={
            "command": sys.executable,
            "args": [
                *("-m", "turnwatch.testing_mcp"),
                *("--log", str(tmp_path / "cancels"), "--calls", str(tmp_path / "calls")),
            ],
        },
        name="ops",
        client_session_timeout_seconds=30,
    )
    two = scripted(("deploy", {"seconds": 1.0}, "a1"), ("deploy", {"seconds": 1.0}, "a2"))
    one = scripted(("deploy", {"seconds": 1.0}, "b1"))
    runner = StoppableRunner(Agent(name="a", model=two, mcp_servers=[server]), runtime)
    other = StoppableRunner(Agent(name="b", model=one, mcp_servers=[server]), runtime)
    async with server:
        stopped_run = asyncio.ensure_future(runner.run("go", session="s"))
        other_run = asyncio.ensure_future(other.run("go", session="o"))
        await until(lambda: len(logged(tmp_path / "calls")) == 3, what="the three calls")
        assert await runtime.abort("s") is Receipt.ACCEPTED
        with pytest.raises(RunStopped):
            await stopped_run
        result = await other_run
    (reply,) = [str(i.output) for i in result.new_items if type(i).__name__ == "ToolCallOutputItem"]
    assert "deploy finished" in reply
    assert "cancel ignored" not in reply
    by_call = {str(e.call): e.session for e in sink.of(names.TOOL_FINISHED) if e.call is not None}
    assert by_call == {"a1": "s", "a2": "s", "b1": "o"}
    assert outcomes(sink) == {
        "a1": "completed_after_stop",
        "a2": "completed_after_stop",
        "b1": "completed",
    }
    cancels = logged(tmp_path / "cancels")
    assert len(cancels) == 2
    assert len(set(cancels)) == 2
    assert set(cancels) < set(logged(tmp_path / "calls"))  # two of the three requests
    no_violations(sink)


async def test_wrapped_an_mcp_call_approved_after_the_stop_never_reaches_its_server(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    """The SDK's own approval of an MCP server's calls (``require_approval``): the prompt is the
    turn's, the stop closes it, and an approval given after it never sends the call."""
    agent, server = deploying(tmp_path, seconds=0.1, approval="always")
    async with server:
        await approved_after_the_stop(StoppableRunner(agent, runtime), runtime, sink)
        # No wait: a call sent would have been awaited to its reply before the run ended.
    assert logged(tmp_path / "calls") == []
    no_violations(sink)


async def test_wrapped_an_mcp_call_approved_in_time_runs_as_the_prompts_call(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    agent, server = deploying(tmp_path, seconds=0.1, approval="always")
    async with server:
        result = await approved_in_time(StoppableRunner(agent, runtime))
    assert result.final_output == "done"
    assert len(logged(tmp_path / "calls")) == 1
    assert outcomes(sink) == {"d1": "completed"}
    no_violations(sink)
