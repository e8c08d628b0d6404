"""How a wrapped LangGraph run's stream is read (:class:`~turnwatch.integrations.langgraph.
StoppableGraph`): which chunk ends a tools step, which event ends a node, and the wait for the
next chunk or the stop. Requires the ``langgraph`` extra."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage

from turnwatch.runtime.session import Turn

#: The mode ``StoppableGraph._run`` gives an ``astream_events`` event.
EVENT = "event"


def node_end(event: Any) -> dict[str, Any] | None:
    """An ``astream_events`` event that ends a node of the graph, as the ``updates`` chunk it
    stands for (``{node: its output}``); None for any other event."""
    if not isinstance(event, dict) or event.get("event") != "on_chain_end":
        return None
    node = (event.get("metadata") or {}).get("langgraph_node")
    if node is None or event.get("name") != node:
        return None  # a runnable inside a node, not the node itself
    return {node: (event.get("data") or {}).get("output")}


def item(raw: Any, events: bool) -> tuple[tuple[str, ...], str, Any]:
    """One item of the run's stream as ``(namespace, mode, chunk)``: an ``astream`` item with
    subgraphs as it comes, an event as ``(its namespace, EVENT, event)`` (a subgraph's node's
    namespace is nested: ``sub:<id>|tools:<id>``)."""
    if not events:
        if len(raw) == 2:  # a graph with no subgraphs streams (mode, chunk)
            return (), *raw
        ns, mode, chunk = raw
        return tuple(ns), mode, chunk
    where = str((raw.get("metadata") or {}).get("langgraph_checkpoint_ns") or "")
    return (tuple(where.split("|")[:-1]) if "|" in where else ()), EVENT, raw


def update_of(mode: str, chunk: Any) -> Any:
    """What a ``(mode, chunk)`` of the run says of a node's end, as an ``updates`` chunk (an
    event that ends a node, or an ``updates`` chunk itself); None for anything else."""
    if mode == EVENT:
        return node_end(chunk)
    return chunk if mode == "updates" else None


def note(chunk: Any, asked: set[str], answered: dict[str, ToolMessage]) -> bool:
    """Read an ``updates`` chunk: the calls a model's message asks for (``asked``, replaced),
    the ``ToolMessage``s that answer them (``answered``, by call); True if it answered any."""
    if not isinstance(chunk, dict):
        return False
    answers = False
    for update in chunk.values():
        found = update.get("messages") if isinstance(update, dict) else None
        for m in found if isinstance(found, list) else ():
            if isinstance(m, AIMessage) and m.tool_calls:
                asked.clear()
                asked.update(str(c["id"]) for c in m.tool_calls)
            elif isinstance(m, ToolMessage):
                answered[str(m.tool_call_id)] = m
                answers = True
    return answers


async def first(
    step: asyncio.Future[Any], stopped: asyncio.Event, turn: Turn, unanswered: Iterable[str]
) -> None:
    """Until the graph's next chunk, or the stop while the tools step is not under way (none
    of the turn's calls in flight, and none of the model's calls still ``unanswered`` begun:
    the model's step, or a node before the tools, is what runs, and it is cancelled). Once the
    tools step is under way, its answers are waited for: the walk resolves the calls, and the
    step ends with them (its update, or its node's end event, which comes after the last
    call's own events)."""
    while not step.done():
        waiter = asyncio.ensure_future(stopped.wait())
        try:
            await asyncio.wait((step, waiter), return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if step.done():
            return
        if not turn.in_flight and not any(c in turn.calls for c in unanswered):
            return
        await asyncio.wait((step,))
