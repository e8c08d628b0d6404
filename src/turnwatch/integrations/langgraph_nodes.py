"""The ``ToolNode`` side of the LangGraph wrapper: :func:`tool_node` builds a node over tools,
:func:`wrap_tool_node` takes one an application built; in both, each call is a call of the run's
turn (:class:`Hook`, their ``awrap_tool_call``, which ``TurnwatchMiddleware`` shares). Requires
the ``langgraph`` extra."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest

from turnwatch.integrations.langgraph_checkpoints import stopped_words
from turnwatch.integrations.wrappers import (
    CLASS_KEY,
    HOSTED_KEY,
    RUN_TURN,
    Dispatcher,
    declared_class,
    dispatcher,
    require_async_process,
)
from turnwatch.runtime.model import Outcome, ToolClass
from turnwatch.runtime.runtime import Runtime

__all__ = ["Hook", "tool_node", "wrap_tool_node"]

Execute = Callable[[ToolCallRequest], Awaitable[Any]]


class Hook:
    """The ``awrap_tool_call`` of a wrapped ``ToolNode``: each call a call of the run's turn."""

    def __init__(self, runtime: Runtime, tools: Sequence[BaseTool], default: ToolClass):
        self.classes: dict[str, ToolClass] = {}
        self.default = default
        self.dispatch: Dispatcher = dispatcher(runtime.host, "tool_node")
        for t in tools:  # every class checked before any tool is registered
            self.classes[t.name] = class_of(t, default)
        for t in tools:
            self.learn(t)

    def learn(self, tool: BaseTool) -> None:
        """A tool, by its metadata: its class (a tool first seen at its call, one another
        middleware added, is classed then, before it runs) and whether it runs hosted."""
        cls = self.classes.get(tool.name) or class_of(tool, self.default)
        self.dispatch.add_tools([tool.name])
        self.classes[tool.name] = self.dispatch.classes[tool.name] = cls
        if (tool.metadata or {}).get(HOSTED_KEY):
            self.dispatch.hosted.add(tool.name)

    async def __call__(self, request: ToolCallRequest, execute: Execute) -> Any:
        turn = RUN_TURN.get()
        if turn is None:  # the node run outside a StoppableGraph: LangGraph's own way
            return await execute(request)
        call = request.tool_call
        name, call_id = call["name"], call["id"] or ""
        cls = self.classes.get(name, self.default)
        key, args = (turn.session.id, call_id), call.get("args") or {}
        ours = self.dispatch.renamed.pop(key, call_id)  # a paused call's resumption: its own id
        value, error, result = await self.dispatch.run(
            turn, name, cls, ours, args, execute, request, PAUSES
        )
        if isinstance(error, GraphBubbleUp):
            # The tool's own interrupt(): its call ended there, asking its user (not a
            # failure), and the graph's run pauses; its resumption is asked for then, as the
            # turn's permission (langgraph_approvals.resumptions).
            self.dispatch.paused[key] = (name, args)
            raise error
        if result.outcome in (Outcome.COMPLETED, Outcome.COMPLETED_AFTER_STOP) and value:
            return value  # its real result, after the stop too
        if error is not None and result.outcome is Outcome.FAILED:
            raise error  # the node's own error handling, as without the wrapper
        return ToolMessage(
            content=stopped_words(result.outcome, result.output),
            name=name,
            tool_call_id=call_id,
            status="error",
        )


#: What a tool raises to pause its call: its ``interrupt()`` (and LangGraph's other bubbles).
PAUSES = (GraphBubbleUp,)


def class_of(tool: BaseTool, default: ToolClass) -> ToolClass:
    """The tool's declared class; a process tool must be an async function (``@tool async
    def``) that starts its commands with ``run_command``. An MCP tool (``langchain.mcp``'s,
    whose metadata has ``mcp``) is an ``extension`` unless it says otherwise, as the ADR
    classes MCP calls, whatever ``default`` the other tools get."""
    if "mcp" in (tool.metadata or {}):
        default = ToolClass.EXTENSION
    cls = declared_class(tool.name, tool.metadata, default)
    require_async_process(tool.name, cls, getattr(tool, "coroutine", None), "run_command")
    return cls


def tool_node(
    tools: Sequence[BaseTool],
    runtime: Runtime,
    *,
    default_class: ToolClass | str = ToolClass.MUTATING,
    **kwargs: Any,
) -> ToolNode:
    """A ``ToolNode`` over ``tools`` whose calls, in a :class:`StoppableGraph`, are turnwatch
    calls by class; ``kwargs`` go to ``ToolNode`` (its own ``awrap_tool_call`` is the wrapper's)."""
    if "awrap_tool_call" in kwargs or "wrap_tool_call" in kwargs:
        raise TypeError("tool_node sets the node's tool-call hook itself")
    default = declared_class("default_class", {CLASS_KEY: default_class}, ToolClass.MUTATING)
    return ToolNode(list(tools), awrap_tool_call=Hook(runtime, tools, default), **kwargs)


def wrap_tool_node(
    node: ToolNode, runtime: Runtime, *, default_class: ToolClass | str = ToolClass.MUTATING
) -> ToolNode:
    """A ``ToolNode`` an application built, as :func:`tool_node` builds one: the same tools,
    name, tags, error handling and messages key, its calls turnwatch calls by class. A hook the
    node has (``awrap_tool_call``) runs inside the turnwatch call (a retry in it stays one
    call); its sync hook (``wrap_tool_call``) is kept for the sync path."""
    default = declared_class("default_class", {CLASS_KEY: default_class}, ToolClass.MUTATING)
    tools = list(node.tools_by_name.values())
    hook = Hook(runtime, tools, default)
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
