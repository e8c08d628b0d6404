"""LangGraph's MCP tools (``langchain.mcp``), native and wrapped: tools of a real MCP server over
stdio (``turnwatch.testing_mcp``: ``deploy`` ignores a cancel and replies late,
``errors_on_cancel`` answers a cancel with an error, ``--calls``/``--log`` record each request's
id and each cancel's).

Native, a cancel of the run abandons the call: the server is told, the deploy goes on, and its
reply is lost with an unanswered call in the history. Wrapped (:func:`mcp_tools`), an MCP call
is an ``extension`` call: the stop sends ``notifications/cancelled`` naming its very request,
``rt.abort()`` returns once the server answered, and the answer is the call's ``ToolMessage``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fastmcp.client import Client
from fastmcp.client.group import ClientGroup
from fastmcp.client.transports import StdioTransport
from langchain_core._api import suppress_langchain_beta_warning
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

from tests.conftest import until
from tests.integrations.lg_graphs import Scripted, agent_graph
from tests.integrations.lg_tools import unanswered
from turnwatch import names
from turnwatch.integrations.langgraph import (
    StoppableGraph,
    ToolClassError,
    stopped_words,
    tool_node,
)
from turnwatch.integrations.langgraph_mcp import mcp_tools
from turnwatch.integrations.wrappers import dispatcher
from turnwatch.runtime import MemorySink, Outcome, Receipt, Runtime, ToolClass
from turnwatch.testing import check_invariants

with suppress_langchain_beta_warning():
    from langchain.mcp import MCPAdapter

DEPLOY_S = 1.5


class Server:
    """One ``testing_mcp`` server: its client, and the ids it saw called and cancelled."""

    def __init__(self, tmp: Path, name: str = "srv", *, modern: bool = False) -> None:
        self.calls_log, self.cancels_log = tmp / f"{name}.calls", tmp / f"{name}.cancels"
        self.client: Client[Any] = Client(
            StdioTransport(
                command=sys.executable,
                args=[
                    "-m",
                    "turnwatch.testing_mcp",
                    "--calls",
                    str(self.calls_log),
                    "--log",
                    str(self.cancels_log),
                    *(["--modern"] if modern else []),
                ],
            )
        )

    def called(self) -> list[str]:
        return _lines(self.calls_log)

    def cancelled(self) -> list[str]:
        return _lines(self.cancels_log)


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.fixture
def rt(runtime: Runtime) -> Runtime:
    return runtime


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    srv = Server(tmp_path)
    async with srv.client:  # one server process for the test
        yield srv


def script(tool: str, **args: Any) -> Scripted:
    call = {"id": "m1", "name": tool, "args": args}
    return Scripted(messages=iter([AIMessage(content="", tool_calls=[call]), AIMessage("ok")]))


def answer(messages: list[Any], call_id: str = "m1") -> ToolMessage:
    (said,) = [m for m in messages if isinstance(m, ToolMessage) and m.tool_call_id == call_id]
    return said


def outcomes(sink: MemorySink) -> dict[str, Any]:
    return {
        str(e.call): e.attrs.get("outcome")
        for e in sink
        if e.kind == names.TOOL_FINISHED and e.call is not None
    }


def wrapped(rt: Runtime, tools: list[BaseTool], model: Scripted) -> StoppableGraph:
    """The model's graph, its tools in a wrapped ``ToolNode``, run on ``rt``."""
    return StoppableGraph(agent_graph(tool_node(tools, rt), model, InMemorySaver()), rt)


async def stop_midway(rt: Runtime, app: StoppableGraph, server: Server, session: str) -> Any:
    """Run the graph, stop it once the server got the call, and return its final state."""
    cfg = {"configurable": {"thread_id": session}}
    run = asyncio.ensure_future(app.ainvoke({"messages": [("user", "go")]}, cfg, session=session))
    await until(lambda: bool(server.called()), what="the server to get the call")
    assert await rt.abort(session) is Receipt.ACCEPTED
    return await asyncio.wait_for(run, 10)


async def test_native_a_cancelled_run_abandons_the_call_and_loses_its_reply(
    server: Server,
) -> None:
    tools = await MCPAdapter(server.client).list_tools()
    app = agent_graph(ToolNode(tools), script("deploy", seconds=DEPLOY_S), InMemorySaver())
    cfg = {"configurable": {"thread_id": "n"}}
    run = asyncio.ensure_future(app.ainvoke({"messages": [("user", "go")]}, cfg))
    await until(lambda: bool(server.called()), what="the server to get the call")
    started = time.monotonic()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert time.monotonic() - started < DEPLOY_S  # the run did not wait for the deploy
    state = await app.aget_state(cfg)
    assert unanswered(state.values["messages"]) == {"m1"}  # the deploy's reply: nowhere


async def test_wrapped_the_stop_cancels_the_very_request_and_awaits_its_late_result(
    rt: Runtime, sink: MemorySink, server: Server
) -> None:
    tools = await mcp_tools(server.client)
    app = wrapped(rt, tools, script("deploy", seconds=DEPLOY_S))
    started = time.monotonic()
    final = await stop_midway(rt, app, server, "w")
    assert time.monotonic() - started >= DEPLOY_S  # abort() waited for the server's reply
    assert server.cancelled() == server.called()  # the cancel named the call's own request
    said = answer(final["messages"])
    assert said.status == "success"
    assert "deploy finished after 1.5s (cancel ignored)" in str(said.content)
    assert unanswered(final["messages"]) == set()
    assert outcomes(sink) == {"m1": "completed_after_stop"}
    assert check_invariants(list(sink)) == []


async def test_wrapped_an_error_reply_to_the_cancel_is_the_calls_abort(
    rt: Runtime, sink: MemorySink, server: Server
) -> None:
    tools = await mcp_tools(server.client)
    model = script("errors_on_cancel", seconds=30)
    final = await stop_midway(rt, wrapped(rt, tools, model), server, "e")
    assert server.cancelled() == server.called()
    said = answer(final["messages"])
    assert said.status == "error"
    assert "ended" in str(said.content)
    assert outcomes(sink) == {"m1": "aborted"}
    assert check_invariants(list(sink)) == []


async def test_wrapped_a_read_only_mcp_call_is_discarded_and_its_server_told(
    rt: Runtime, sink: MemorySink, server: Server
) -> None:
    tools = await mcp_tools(server.client)
    for t in tools:
        t.metadata = {**(t.metadata or {}), "turnwatch_class": "read_only"}
    model = script("never_replies")
    final = await stop_midway(rt, wrapped(rt, tools, model), server, "r")
    assert "discarded" in str(answer(final["messages"]).content)
    await until(lambda: server.cancelled() == server.called(), what="the server told")
    assert [e.call for e in sink if e.kind == names.TOOL_RESULT_DISCARDED] == ["m1"]
    assert check_invariants(list(sink)) == []


async def test_wrapped_a_client_group_cancels_at_the_calls_own_server_only(
    rt: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    a, b = Server(tmp_path, "a"), Server(tmp_path, "b")
    group = ClientGroup({"a": a.client, "b": b.client})
    async with group:
        tools = await mcp_tools(group)
        names_ = {t.name for t in tools}
        assert {"a_deploy", "b_deploy"} <= names_
        model = script("b_deploy", seconds=DEPLOY_S)
        final = await stop_midway(rt, wrapped(rt, tools, model), b, "g")
    assert b.cancelled() == b.called() != []
    assert a.called() == a.cancelled() == []
    assert "cancel ignored" in str(answer(final["messages"]).content)
    assert outcomes(sink) == {"m1": "completed_after_stop"}


async def test_create_agent_middleware_learns_an_mcp_tool_at_its_call(
    rt: Runtime, sink: MemorySink, server: Server
) -> None:
    """An MCP tool the middleware was not given (``create_agent``'s tools only) is classed and
    hosted when first called: the stop still cancels its request and awaits it."""
    from langchain.agents import create_agent

    from turnwatch.integrations.langgraph_middleware import TurnwatchMiddleware

    tools = await mcp_tools(server.client)
    agent = create_agent(
        model=script("deploy", seconds=DEPLOY_S),
        tools=tools,
        middleware=[TurnwatchMiddleware(rt)],
        checkpointer=InMemorySaver(),
    )
    final = await stop_midway(rt, StoppableGraph(agent, rt), server, "ca")
    assert server.cancelled() == server.called()
    assert "cancel ignored" in str(answer(final["messages"]).content)
    assert outcomes(sink) == {"m1": "completed_after_stop"}
    classes = {e.call: e.attrs.get(names.K_CLASS) for e in sink if e.kind == names.TOOL_REQUESTED}
    assert classes == {"m1": "extension"}


def _classes(sink: MemorySink) -> set[Any]:
    return {e.attrs.get(names.K_CLASS) for e in sink if e.kind == names.TOOL_REQUESTED}


async def test_an_mcp_tool_is_an_extension_unless_its_metadata_says_otherwise(
    rt: Runtime, server: Server
) -> None:
    tools = await mcp_tools(server.client)
    tool_node(tools, rt, default_class="read_only")
    classes = dispatcher(rt.host, "test").classes
    assert {classes[t.name] for t in tools} == {ToolClass.EXTENSION}
    tools[0].metadata = {**(tools[0].metadata or {}), "turnwatch_class": "deploying"}
    with pytest.raises(ToolClassError, match="deploying"):
        tool_node(tools, rt)  # refused before any tool is registered


async def test_langchain_mcps_own_tools_are_extension_calls_awaited(
    rt: Runtime, sink: MemorySink, server: Server
) -> None:
    """``MCPAdapter``'s own tools, not :func:`mcp_tools`': classed ``extension`` from their
    metadata (not the default ``mutating``), and awaited at the stop (no cancel is sent: their
    request is the SDK's)."""
    tools = await MCPAdapter(server.client).list_tools()
    model = script("deploy", seconds=DEPLOY_S)
    final = await stop_midway(rt, wrapped(rt, tools, model), server, "lc")
    assert "cancel ignored" not in str(answer(final["messages"]).content)  # never told
    assert server.cancelled() == []
    assert "deploy finished" in str(answer(final["messages"]).content)
    assert _classes(sink) == {"extension"}
    assert outcomes(sink) == {"m1": "completed_after_stop"}


async def test_outside_a_stoppable_graph_the_tools_run_as_langchains_do(server: Server) -> None:
    tools: list[BaseTool] = await mcp_tools(server.client)
    (deploy,) = [t for t in tools if t.name == "deploy"]
    native = {t.name: t for t in await MCPAdapter(server.client).list_tools()}["deploy"]
    args = {"seconds": 0.1}
    call = {"id": "x", "name": "deploy", "args": args, "type": "tool_call"}
    ours, theirs = await deploy.ainvoke(call), await native.ainvoke(call)

    def shape(m: ToolMessage) -> Any:  # each block's own id is fresh every time
        blocks = [b for b in m.content if isinstance(b, dict)]
        return [{k: v for k, v in b.items() if k != "id"} for b in blocks], m.artifact, m.status

    assert shape(ours) == shape(theirs)
    assert shape(ours)[0] == [{"type": "text", "text": "deploy finished after 0.1s"}]
    assert server.cancelled() == []


# --- a server's question in the middle of a call (input_required, protocol 2026-07-28) ---

GO = {"messages": [("user", "go")]}
PROD = {"responses": {"where": {"action": "accept", "content": {"env": "prod"}}}}
#: What langchain's tools ask with ``interrupt()`` for ``asks_for_input``'s question.
ASKED = {
    "type": "mcp_elicitation",
    "tool_name": "asks_for_input",
    "requests": [
        {
            "key": "where",
            "message": "Deploy where?",
            "mode": "form",
            "requested_schema": {
                "type": "object",
                "properties": {"env": {"type": "string"}},
                "required": ["env"],
            },
        }
    ],
}


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def of(sink: MemorySink, kind: str) -> list[str]:
    return [str(e.call) for e in sink if e.kind == kind]


@pytest.fixture
async def modern(tmp_path: Path) -> AsyncIterator[tuple[Server, MCPAdapter]]:
    """A server speaking 2026-07-28, and langchain's adapter on it (which says, in each
    request, that its client answers questions)."""
    srv = Server(tmp_path, "modern", modern=True)
    adapter = MCPAdapter(srv.client)
    async with adapter:
        yield srv, adapter


async def test_native_a_servers_question_is_langchains_interrupt(
    modern: tuple[Server, MCPAdapter],
) -> None:
    srv, adapter = modern
    model = script("asks_for_input")
    app = agent_graph(ToolNode(await adapter.list_tools()), model, InMemorySaver())
    paused = await app.ainvoke(GO, cfg("n"))
    assert [i.value for i in paused["__interrupt__"]] == [ASKED]
    final = await app.ainvoke(Command(resume=PROD), cfg("n"))
    assert "deployed to prod" in str(answer(final["messages"]).content)
    # Asked; on the resume, the call again from its start (``interrupt()`` unwound it), asked
    # again and answered this time; then with the answer.
    assert len(srv.called()) == 3


async def test_wrapped_a_servers_question_is_a_permission_of_the_waiting_turn(
    rt: Runtime, sink: MemorySink, modern: tuple[Server, MCPAdapter]
) -> None:
    """Asked as langchain's own tools ask (the same ``interrupt()`` payload, the same resume),
    and, wrapped, the question is the turn's permission: the turn waits, unsettled."""
    srv, adapter = modern
    app = wrapped(rt, await mcp_tools(adapter), script("asks_for_input"))
    paused = await app.ainvoke(GO, cfg("q"), session="q")
    assert [i.value for i in paused["__interrupt__"]] == [ASKED]
    assert of(sink, names.PERMISSION_REQUESTED) == ["m1:resumed"]
    assert of(sink, names.TURN_SETTLED) == []
    final = await app.ainvoke(Command(resume=PROD), cfg("q"), session="q")
    assert "deployed to prod" in str(answer(final["messages"]).content)
    assert of(sink, names.PERMISSION_GRANTED) == ["m1:resumed"]
    assert len(srv.called()) == 3  # as langchain's own (above)
    assert unanswered(final["messages"]) == set()
    assert check_invariants(list(sink)) == []


async def test_wrapped_a_servers_question_answered_after_the_stop_is_never_sent(
    rt: Runtime, sink: MemorySink, modern: tuple[Server, MCPAdapter]
) -> None:
    srv, adapter = modern
    app = wrapped(rt, await mcp_tools(adapter), script("asks_for_input"))
    await app.ainvoke(GO, cfg("s"), session="s")
    assert await rt.abort("s") is Receipt.ACCEPTED
    assert of(sink, names.PERMISSION_CANCELLED) == ["m1:resumed"]
    final = await app.ainvoke(Command(resume=PROD), cfg("s"), session="s")
    assert of(sink, names.PERMISSION_LATE) == ["m1:resumed"]
    assert len(srv.called()) == 1  # the answer never reached the server: nothing deployed
    said = [str(m.content) for m in final["messages"] if isinstance(m, ToolMessage)]
    assert said == [stopped_words(Outcome.REFUSED)]
    assert unanswered(final["messages"]) == set()
    assert check_invariants(list(sink)) == []
