"""MCP tools for LangGraph, stopped the ADR's way: :func:`mcp_tools`. Requires the
``langgraph-mcp`` extra (``langchain.mcp``, which FastMCP's client serves).

``langchain-mcp-adapters``, which the ADR's first LangGraph notes name, is discontinued: its
adapters moved into ``langchain`` itself as ``langchain.mcp`` (in beta since langchain 1.4).
Its tools are ordinary LangChain tools, and in a wrapped graph (``tool_node``,
``wrap_tool_node``, ``TurnwatchMiddleware``) any tool whose metadata has ``mcp`` is an
``extension`` call (awaited at a stop) unless its metadata says otherwise. What they cannot do
is tell the server: their request is the SDK's, under an id only the SDK knows, and an awaited
call is never abandoned, so no ``notifications/cancelled`` is ever sent.

The tools :func:`mcp_tools` returns are the same tools (name, description, schema, metadata,
error handling, result conversion), whose calls go through
:func:`turnwatch.integrations.wrappers.call_mcp_tool`: in a
:class:`~turnwatch.integrations.langgraph.StoppableGraph`, the stop sends
``notifications/cancelled`` naming the call's own request and keeps waiting for the server's
answer: its late real result (``completed_after_stop``, and that result in the call's
``ToolMessage``), its error reply to the cancel (``aborted``), or none (the call stays
awaited; the watchdog's ``await_overdue`` reports it). A ``read_only`` one (``turnwatch_class``
in its metadata) is discarded at the stop, and its server told.

A server's question in the middle of a call (MCP's ``input_required`` result, protocol
2026-07-28) is asked as ``MCPAdapter``'s own tools ask it: an ``interrupt()`` with the same
payload (``MCPElicitationInterrupt``), resumed with the same answers (``MCPElicitationResume``),
the call sent again from its start on the resume. In a ``StoppableGraph`` the question is the
waiting turn's permission: a stop while it waits cancels it, and an answer that comes after
the stop is refused and never reaches the server. A round with no question (work the server
resumes over several round trips) and questions other than elicitations are refused, as
langchain refuses them (``NotImplementedError``).
"""

from __future__ import annotations

from typing import Any

from fastmcp.client import Client
from fastmcp.client.group import ClientGroup
from langchain_core._api import suppress_langchain_beta_warning
from langchain_core.tools import BaseTool
from langgraph.types import interrupt
from mcp import types
from mcp.client.caching import CacheMode

from turnwatch.integrations.wrappers import HOSTED_KEY, call_mcp_tool

with suppress_langchain_beta_warning():  # the namespace's beta status is said above
    from langchain.mcp import MCPAdapter
    from langchain.mcp.elicitation import (
        ELICITATION_INTERRUPT_TYPE,
        _build_responses,
        _describe_request,
        _elicit_requests,
    )
    from langchain.mcp.tools import _convert_call_tool_result

__all__ = ["mcp_tools"]


async def mcp_tools(
    target: MCPAdapter | Client[Any] | ClientGroup, *, cache_mode: CacheMode = "use"
) -> list[BaseTool]:
    """The MCP tools of ``target`` (an ``MCPAdapter``, a FastMCP ``Client`` or ``ClientGroup``)
    as LangChain tools whose calls a stop cancels at their server and still awaits (see the
    module). Give them to ``tool_node``, ``wrap_tool_node``'s node or ``create_agent`` with
    :class:`~turnwatch.integrations.langgraph_middleware.TurnwatchMiddleware`; each is an
    ``extension`` unless its metadata's ``turnwatch_class`` says otherwise."""
    adapter = target if isinstance(target, MCPAdapter) else MCPAdapter(target)
    client = adapter.client
    tools = await adapter.list_tools(cache_mode=cache_mode)
    return [_hosted(tool, client) for tool in tools]


def _hosted(tool: BaseTool, client: Client[Any] | ClientGroup) -> BaseTool:
    name = tool.name

    async def call(**arguments: Any) -> Any:
        async with client:
            member, upstream = client, name
            if isinstance(client, ClientGroup):
                route = await client.resolve_tool(name)
                member, upstream = route.client, route.upstream_name
            assert isinstance(member, Client)
            raw = await call_mcp_tool(member.session, upstream, arguments)
            while raw.get("resultType") == "input_required":
                asked = types.InputRequiredResult.model_validate(raw)
                answers = _ask(name, asked)
                raw = await call_mcp_tool(
                    member.session, upstream, arguments, answers=answers, state=asked.request_state
                )
        return _convert_call_tool_result(types.CallToolResult.model_validate(raw))

    metadata = {"mcp": {}, **(tool.metadata or {}), HOSTED_KEY: True}
    return tool.model_copy(update={"coroutine": call, "metadata": metadata})


def _ask(name: str, asked: types.InputRequiredResult) -> dict[str, Any]:
    """The server's questions asked with ``interrupt()`` as langchain's own tools ask them (the
    run pauses here; on its resume, the call runs again from its start and this returns the
    answers), as the next round's ``inputResponses``."""
    if not asked.input_requests:
        raise NotImplementedError(
            f"The MCP tool {name!r} returned a continuation round with no input requests, "
            "which mcp_tools does not follow (it answers elicitation requests only)."
        )
    requests = _elicit_requests(asked.input_requests, name)
    resume = interrupt(
        {
            "type": ELICITATION_INTERRUPT_TYPE,
            "tool_name": name,
            "requests": [_describe_request(key, req) for key, req in requests.items()],
        }
    )
    answers = _build_responses(requests, resume["responses"], name)
    return {
        key: answer.model_dump(by_alias=True, mode="json", exclude_none=True)
        for key, answer in answers.items()
    }
