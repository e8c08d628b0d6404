"""A ``ToolNode`` an application built, wrapped: :func:`wrap_tool_node` (``tool_node`` builds
one from the tools; this takes the node as it is). Requires the ``langgraph`` extra."""

from __future__ import annotations

from typing import Any

from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest

from turnwatch.integrations.langgraph import Execute, _Hook
from turnwatch.integrations.wrappers import CLASS_KEY, declared_class
from turnwatch.runtime.model import ToolClass
from turnwatch.runtime.runtime import Runtime

__all__ = ["wrap_tool_node"]


def wrap_tool_node(
    node: ToolNode, runtime: Runtime, *, default_class: ToolClass | str = ToolClass.MUTATING
) -> ToolNode:
    """A ``ToolNode`` an application built, as :func:`tool_node` builds one: the same tools,
    name, tags, error handling and messages key, its calls turnwatch calls by class. A hook the
    node has (``awrap_tool_call``) runs inside the turnwatch call (a retry in it stays one
    call); its sync hook (``wrap_tool_call``) is kept for the sync path."""
    default = declared_class("default_class", {CLASS_KEY: default_class}, ToolClass.MUTATING)
    tools = list(node.tools_by_name.values())
    hook = _Hook(runtime, tools, default)
    inner = getattr(node, "_awrap_tool_call", None)

    async def outer(request: ToolCallRequest, execute: Execute) -> Any:
        if inner is None:
            return await hook(request, execute)
        return await hook(request, lambda req: inner(req, execute))

    # The node's settings, as its constructor stored them (ToolNode has no accessor for them).
    kept = {
        key: getattr(node, f"_{key}")
        for key in ("handle_tool_errors", "messages_key", "wrap_tool_call")
        if hasattr(node, f"_{key}")
    }
    tags = list(node.tags) if node.tags is not None else None
    return ToolNode(tools, name=node.name or "tools", tags=tags, awrap_tool_call=outer, **kept)
