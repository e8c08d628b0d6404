"""``create_agent``'s tools, wrapped: :class:`TurnwatchMiddleware`, an ``AgentMiddleware`` for
LangChain's ``create_agent`` (and so for the graphs built on it). Requires the ``langgraph``
extra (it brings the ``langchain`` package).

In a :class:`~turnwatch.integrations.langgraph.StoppableGraph`, each tool call of the agent is a
turnwatch call of the run's turn, by its class (``turnwatch_class`` in the tool's ``metadata``;
unset: ``default_class``), exactly as a :func:`~turnwatch.integrations.langgraph.tool_node`'s:
the stop discards read-only calls, ends process calls within the grace window, awaits mutating
and extension ones, and every call it reached gets its ``ToolMessage``. Outside a
``StoppableGraph`` (or through the sync ``invoke``) the calls run as LangGraph runs them.

Give the middleware the agent's tools: their classes are checked when it is built (an unknown
class, or a sync process tool, is a :class:`~turnwatch.integrations.wrappers.ToolClassError`
then, not at a stop). A tool it was not given (one another middleware adds) is classed from its
own metadata when first called, before it runs. In ``middleware=[…]`` (the first is
outermost) put it after ``HumanInTheLoopMiddleware`` (a call is one once it may run; its
approval is a pending permission, :mod:`turnwatch.integrations.langgraph_approvals`) and before
a retry middleware (which then retries within the one turnwatch call).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest

from turnwatch.integrations.langgraph_nodes import Hook
from turnwatch.integrations.wrappers import CLASS_KEY, declared_class
from turnwatch.runtime.model import ToolClass
from turnwatch.runtime.runtime import Runtime

__all__ = ["TurnwatchMiddleware"]


class TurnwatchMiddleware(AgentMiddleware):
    """The ADR's stop for ``create_agent``'s tool calls (see the module)."""

    #: Its calls are turnwatch calls: a ``StoppableGraph`` leaves the agent's ``ToolNode`` be.
    turnwatch_hook = True

    def __init__(
        self,
        runtime: Runtime,
        tools: Sequence[BaseTool] = (),
        *,
        default_class: ToolClass | str = ToolClass.MUTATING,
    ) -> None:
        super().__init__()
        default = declared_class("default_class", {CLASS_KEY: default_class}, ToolClass.MUTATING)
        self.hook = Hook(runtime, tools, default)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> Any:
        tool = request.tool
        if tool is not None and tool.name not in self.hook.classes:
            self.hook.learn(tool)
        return await self.hook(request, handler)

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]
    ) -> Any:
        """The sync path (``agent.invoke``): no turn runs it, so LangGraph's own way."""
        return handler(request)
