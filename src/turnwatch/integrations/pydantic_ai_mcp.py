"""pydantic-ai's MCP toolsets (``MCPToolset``, pydantic-ai's own ``[mcp]`` extra) under the stop:
a call of one of their tools tells its server of the stop, naming its own request, and is still
awaited (the ADR's ``extension`` policy). Without that extra no MCP toolset exists, and nothing
here does anything.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import AbstractToolset

from turnwatch.integrations.call_slot import tap_session

try:
    from pydantic_ai.mcp import MCPToolset
except ImportError:  # pydantic-ai without its [mcp] extra (fastmcp): no MCP toolset can exist
    MCPToolset = None  # type: ignore[assignment,misc]

__all__ = ["tap_mcp_tool"]


def tap_mcp_tool(ctx: RunContext[Any], name: str) -> bool:
    """Whether the tool ``name`` of this run step is an MCP server's (its toolset, or one it
    wraps, prefixed or filtered, is an ``MCPToolset``); if so, each such server's session is
    tapped (:func:`~turnwatch.integrations.call_slot.tap_session`), so that the call, run
    hosted, sends its request under an id the stop's cancel names."""
    manager = ctx.tool_manager
    tool = None if manager is None or manager.tools is None else manager.tools.get(name)
    if tool is None or MCPToolset is None:
        return False
    found: list[bool] = []

    def visit(toolset: AbstractToolset[Any]) -> None:
        if isinstance(toolset, MCPToolset):
            found.append(True)
            if toolset.client.is_connected():
                tap_session(toolset.client.session)

    tool.toolset.apply(visit)
    return bool(found)
