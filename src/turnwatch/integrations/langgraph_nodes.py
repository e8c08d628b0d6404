"""The ``ToolNode`` side of the LangGraph wrapper: :func:`tool_node` builds a node over tools,
:func:`wrap_tool_node` takes one an application built; in both, each call is a call of the run's
turn (:class:`Hook`, their ``awrap_tool_call``, which ``TurnwatchMiddleware`` shares). Requires
the ``langgraph`` extra."""

from __future__ import annotations

import collections
import contextlib
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
    ToolClassError,
    declared_class,
    dispatcher,
    require_async_process,
)
from turnwatch.runtime.model import Outcome, ToolClass
from turnwatch.runtime.runtime import Runtime
from turnwatch.runtime.turn import Turn

__all__ = ["Around", "Hook", "adopt_tool_nodes", "tool_node", "wrap_tool_node"]

Execute = Callable[[ToolCallRequest], Awaitable[Any]]


class Hook:
    """The ``awrap_tool_call`` of a wrapped ``ToolNode``: each call a call of the run's turn."""

    #: What :func:`adopt_tool_nodes` looks for in a node's hook (and ``TurnwatchMiddleware``
    #: carries): its calls are turnwatch calls already.
    turnwatch_hook = True

    def __init__(self, runtime: Runtime, tools: Sequence[BaseTool], default: ToolClass):
        self.classes: dict[str, ToolClass] = {}
        self.hosted: set[str] = set()
        self.default = default
        self.dispatch: Dispatcher = dispatcher(runtime.host, "tool_node")
        for t in tools:  # every class checked before any tool is registered
            self.classes[t.name] = class_of(t, default)
        for t in tools:
            self.learn(t)

    def learn(self, tool: BaseTool) -> None:
        """A tool, by its metadata: its class (a tool first seen at its call, one another
        middleware added, is classed then, before it runs) and whether it runs hosted."""
        self.classes[tool.name] = self.classes.get(tool.name) or class_of(tool, self.default)
        if (tool.metadata or {}).get(HOSTED_KEY):
            self.hosted.add(tool.name)
        self._register(self.dispatch, tool.name)

    def _register(self, dispatch: Dispatcher, name: str) -> None:
        dispatch.add_tools([name])
        dispatch.classes[name] = self.classes[name]
        if name in self.hosted:
            dispatch.hosted.add(name)

    def _dispatch(self, turn: Turn) -> Dispatcher:
        """The dispatcher of the turn's host: the node's (a graph given to another runtime's
        :class:`StoppableGraph` runs its calls on that runtime's host), its tools registered."""
        host = turn.session.env.call.host
        if host is self.dispatch.host:
            return self.dispatch
        dispatch = dispatcher(host, "tool_node")
        for name in self.classes.keys() - dispatch.classes.keys():
            self._register(dispatch, name)
        return dispatch

    async def __call__(self, request: ToolCallRequest, execute: Execute) -> Any:
        turn = RUN_TURN.get()
        if turn is None:  # the node run outside a StoppableGraph: LangGraph's own way
            return await execute(request)
        call = request.tool_call
        name, call_id = call["name"], call["id"] or ""
        cls = self.classes.get(name, self.default)
        key, args = (turn.session.id, call_id), call.get("args") or {}
        dispatch = self._dispatch(turn)
        ours = dispatch.renamed.pop(key, call_id)  # a paused call's resumption: its own id
        value, error, result = await dispatch.run(
            turn, name, cls, ours, args, execute, request, PAUSES
        )
        if isinstance(error, GraphBubbleUp):
            # The tool's own interrupt(): its call ended there, asking its user (not a
            # failure), and the graph's run pauses; its resumption is asked for then, as the
            # turn's permission (langgraph_approvals.resumptions).
            dispatch.paused[key] = (name, args)
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


class Around:
    """A node's own ``awrap_tool_call``, run inside the turnwatch call (a retry in it stays one
    call)."""

    turnwatch_hook = True

    def __init__(self, hook: Hook, inner: Callable[[ToolCallRequest, Execute], Awaitable[Any]]):
        self.hook, self.inner = hook, inner

    async def __call__(self, request: ToolCallRequest, execute: Execute) -> Any:
        return await self.hook(request, lambda req: self.inner(req, execute))


def wrap_tool_node(
    node: ToolNode, runtime: Runtime, *, default_class: ToolClass | str = ToolClass.MUTATING
) -> ToolNode:
    """A ``ToolNode`` an application built, as :func:`tool_node` builds one: the same tools,
    name, tags, error handling and messages key, its calls turnwatch calls by class. A hook the
    node has (``awrap_tool_call``) runs inside the turnwatch call (a retry in it stays one
    call); its sync hook (``wrap_tool_call``) is kept for the sync path."""
    default = declared_class("default_class", {CLASS_KEY: default_class}, ToolClass.MUTATING)
    # The node's settings, as its constructor stored them (ToolNode has no accessor for them).
    kept = {
        key: getattr(node, f"_{key}")
        for key in ("handle_tool_errors", "messages_key", "wrap_tool_call")
        if hasattr(node, f"_{key}")
    }
    tags = list(node.tags) if node.tags is not None else None
    tools = list(node.tools_by_name.values())
    hook = _hook(node, Hook(runtime, tools, default))
    return ToolNode(tools, name=node.name or "tools", tags=tags, awrap_tool_call=hook, **kept)


def adopt_tool_nodes(graph: Any, runtime: Runtime, default: ToolClass) -> int:
    """Every ``ToolNode`` of ``graph`` and of its subgraphs whose calls are not turnwatch calls
    (built as LangGraph builds one: ``ToolNode(tools)``, ``create_react_agent``'s), made so in
    place, as :func:`wrap_tool_node` makes a copy: how many. Outside a turn the node still runs
    LangGraph's way. Every node is checked before any is changed: a tool of no known class, or
    a node whose only hook is sync (``wrap_tool_call``, which a turn's async run never calls),
    is a :class:`ToolClassError` and leaves the graph as it was."""
    graphs = [graph, *(sub for _ns, sub in getattr(graph, "get_subgraphs", _none)(recurse=True))]
    found: dict[int, tuple[ToolNode, Hook]] = {}
    for g in graphs:
        for name, pregel_node in getattr(g, "nodes", {}).items():
            node = getattr(pregel_node, "bound", None)
            if not isinstance(node, ToolNode) or id(node) in found:
                continue
            if _reaches_hook(getattr(node, "_awrap_tool_call", None)):
                continue  # tool_node's, wrap_tool_node's, create_agent's with the middleware
            if getattr(node, "_awrap_tool_call", None) is None and node._wrap_tool_call:  # noqa: SLF001
                raise ToolClassError(
                    f"ToolNode {name!r}: its only hook is a sync wrap_tool_call, which a "
                    "StoppableGraph's async run never calls: give it an awrap_tool_call, or "
                    "build it with tool_node()"
                )
            found[id(node)] = node, Hook(runtime, list(node.tools_by_name.values()), default)
    for node, hook in found.values():
        node._awrap_tool_call = _hook(node, hook)  # noqa: SLF001 - read at each call
    return len(found)


def _hook(node: ToolNode, hook: Hook) -> Hook | Around:
    """``hook`` around the node's own ``awrap_tool_call``, if it has one."""
    inner = getattr(node, "_awrap_tool_call", None)
    return hook if inner is None else Around(hook, inner)


def _reaches_hook(fn: object, budget: int = 256) -> bool:
    """Whether the hook ``fn`` calls a turnwatch hook: it is one, or holds one among what it
    holds (LangGraph and langchain compose a node's hooks in closures: ``create_agent`` its
    middlewares', each behind a tracing wrapper), searched breadth first through closures,
    ``__wrapped__``, a bound method's ``__self__``, a partial's ``func`` and the sequences among
    them, at most ``budget`` objects."""
    todo: collections.deque[object] = collections.deque([fn])
    seen: set[int] = set()
    while todo and len(seen) < budget:
        obj = todo.popleft()
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        if getattr(type(obj), "turnwatch_hook", False):  # the type's: no property of it runs
            return True
        if isinstance(obj, (list, tuple)):
            todo.extend(obj)
            continue
        for attr in ("__wrapped__", "__self__", "func"):
            todo.append(getattr(obj, attr, None))
        for cell in getattr(obj, "__closure__", None) or ():
            with contextlib.suppress(ValueError):  # a cell not yet filled
                todo.append(cell.cell_contents)
    return False


def _none(**_kw: Any) -> list[tuple[str, Any]]:
    return []
