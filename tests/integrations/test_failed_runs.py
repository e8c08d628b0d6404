"""A wrapped run that fails while another of its calls still runs: the run raises at once, and
what its calls left running is released as a stop releases it (``Turn.finish(FAILED)``).

Before, the failure waited for every call to end of itself: a pydantic-ai run whose read tool
raised while its shell command (a tree that ignores SIGTERM) ran raised only once the command
ended, minutes later, with the session "processing" all along and nothing to end the tree.
"""

from __future__ import annotations

import asyncio

import pytest
from agents import Agent as SdkAgent
from agents import Tool, function_tool
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from pydantic_ai import Agent
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models.function import FunctionModel

from tests.conftest import GRACE, until
from tests.integrations import adk_parts as adk
from tests.integrations.lg_graphs import Scripted, agent_graph
from tests.integrations.lg_tools import classed
from tests.integrations.pai_parts import TERM_IGNORING_TREE, calls, marked_alive
from tests.integrations.procs import marked_alive as lg_alive
from tests.integrations.test_openai_agents import scripted
from tests.integrations.test_wrapper_edges import settled, sh_tool
from tests.integrations.verdicts import outcomes
from turnwatch.integrations import openai_agents
from turnwatch.integrations.langgraph import StoppableGraph, tool_node
from turnwatch.integrations.pydantic_ai import StoppableAgent
from turnwatch.integrations.wrappers import run_command
from turnwatch.runtime import MemorySink, Runtime
from turnwatch.testing import check_invariants

SLACK_S = 5.0


async def test_pydantic_ai_a_run_that_fails_ends_what_its_calls_left_running(
    runtime: Runtime, sink: MemorySink
) -> None:
    model = calls(ToolCallPart("sh", {}, "p1"), ToolCallPart("look", {}, "r1"))
    agent = Agent(FunctionModel(model))

    @agent.tool_plain(metadata={"turnwatch_class": "process"})
    async def sh() -> str:
        return (await run_command(["bash", "-c", TERM_IGNORING_TREE])).output

    @agent.tool_plain(metadata={"turnwatch_class": "read_only"})
    async def look() -> str:
        await until(lambda: len(marked_alive()) >= 3, what="the tree to start")
        raise RuntimeError("the index is corrupt")

    run = StoppableAgent(agent, runtime).run("go", session="s")
    with pytest.raises(RuntimeError, match="the index is corrupt"):
        await asyncio.wait_for(run, GRACE + SLACK_S)
    assert marked_alive() == []
    assert outcomes(sink) == {"r1": "failed", "p1": "aborted"}
    assert settled(sink) == ["failed"]
    assert not runtime.session("s").processing
    assert check_invariants(list(sink)) == []


async def test_langgraph_a_run_that_fails_ends_what_its_calls_left_running(
    runtime: Runtime, sink: MemorySink
) -> None:
    @classed("process")
    @tool
    async def sh() -> str:
        """a shell command that ignores SIGTERM"""
        return (await run_command(["bash", "-c", TERM_IGNORING_TREE])).output

    @classed("read_only")
    @tool
    async def look() -> str:
        """a read that fails once the shell runs"""
        await until(lambda: len(lg_alive("s")) >= 3, what="the tree to start")
        raise RuntimeError("the index is corrupt")

    asks = [{"name": "sh", "args": {}, "id": "p1"}, {"name": "look", "args": {}, "id": "r1"}]
    model = Scripted(messages=iter([AIMessage(content="", tool_calls=asks)]))
    # handle_tool_errors=False: the tool's error fails the run, as LangGraph raises it.
    node = tool_node([sh, look], runtime, handle_tool_errors=False)
    app = StoppableGraph(agent_graph(node, model), runtime)
    run = app.ainvoke({"messages": [("user", "go")]}, session="s")
    with pytest.raises(RuntimeError, match="the index is corrupt"):
        await asyncio.wait_for(run, GRACE + SLACK_S)
    assert lg_alive("s") == []
    assert outcomes(sink) == {"r1": "failed", "p1": "aborted"}
    assert settled(sink) == ["failed"]
    assert check_invariants(list(sink)) == []


async def test_sdk_a_run_that_fails_ends_what_its_calls_left_running(
    runtime: Runtime, sink: MemorySink
) -> None:
    async def look() -> str:
        """A read that fails once the shell runs."""
        await until(lambda: len(marked_alive()) >= 3, what="the tree to start")
        raise RuntimeError("the index is corrupt")

    tools: list[Tool] = [
        openai_agents.tool_class(
            function_tool(sh_tool(openai_agents.run_command), name_override="sh"), "process"
        ),
        # failure_error_function=None: the tool's error fails the run, as the SDK raises it.
        openai_agents.tool_class(function_tool(look, failure_error_function=None), "read_only"),
    ]
    sdk = SdkAgent(name="a", model=scripted(("sh", {}, "p1"), ("look", {}, "r1")), tools=tools)
    run = openai_agents.StoppableRunner(sdk, runtime).run("go", session="s")
    with pytest.raises(Exception, match="the index is corrupt"):
        await asyncio.wait_for(run, GRACE + SLACK_S)
    assert marked_alive() == []
    assert outcomes(sink) == {"r1": "failed", "p1": "aborted"}
    assert settled(sink) == ["failed"]
    assert check_invariants(list(sink)) == []


async def test_adk_a_run_that_fails_ends_what_its_calls_left_running(
    runtime: Runtime, sink: MemorySink
) -> None:
    async def sh() -> str:
        """a shell command that ignores SIGTERM"""
        return (await run_command(["bash", "-c", TERM_IGNORING_TREE])).output

    async def look() -> str:
        """a read that fails once the shell runs"""
        await until(lambda: len(lg_alive(sid)) >= 3, what="the tree to start")
        raise RuntimeError("the index is corrupt")

    tools = [adk.classed(sh, "process"), adk.classed(look, "read_only")]
    step = adk.says(adk.call("p1", "sh"), adk.call("r1", "look"))
    runner, app = adk.wrapped(runtime, tools, adk.model(step))
    sid = await adk.new_session(runner)
    run = adk.consume(app.run_async(user_id="u", session_id=sid, new_message=adk.HI))
    with pytest.raises(Exception, match="the index is corrupt"):
        await asyncio.wait_for(run, GRACE + SLACK_S)
    assert lg_alive(sid) == []
    assert outcomes(sink) == {"r1": "failed", "p1": "aborted"}
    assert settled(sink) == ["failed"]
    assert check_invariants(list(sink)) == []
