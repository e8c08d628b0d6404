"""How a wrapped LangGraph run's stream is read (:class:`~turnwatch.integrations.langgraph.
StoppableGraph`): which chunk ends a tools step, which event ends a node, and the wait for the
next chunk or the stop. Requires the ``langgraph`` extra."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.errors import GraphDrained

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


def item(raw: Any, events: bool, v2: bool = False) -> tuple[tuple[str, ...], str, Any]:
    """One item of the run's stream as ``(namespace, mode, chunk)``: an ``astream`` item with
    subgraphs as it comes (``v2``: its ``{"type", "ns", "data"}`` part whole, as the chunk),
    an event as ``(its namespace, EVENT, event)`` (a subgraph's node's namespace is nested:
    ``sub:<id>|tools:<id>``)."""
    if v2:
        return tuple(raw.get("ns") or ()), str(raw["type"]), raw
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


class StopSignal:
    """Set once, by the turn's stop (its ``on_stop``): what the reading of a run's stream races
    each chunk against. A wait on it is a future the signal or the chunk sets, not a task and
    an ``asyncio.wait`` of its own: the stream is read a chunk at a time, and ``create_agent``
    makes a tools step, and so chunks, per call (#31)."""

    __slots__ = ("_set", "_wake")

    def __init__(self) -> None:
        self._set = False
        self._wake: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._set = True
        self._woken()

    def is_set(self) -> bool:
        return self._set

    async def race(self, step: asyncio.Future[Any]) -> None:
        """Until ``step`` is done or the signal is set (``step`` is left as it is)."""
        if self._set or step.done():
            return
        self._wake = wake = step.get_loop().create_future()
        step.add_done_callback(self._woken)
        try:
            await wake
        finally:
            step.remove_done_callback(self._woken)
            self._wake = None

    def _woken(self, _: object = None) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)


async def first(
    step: asyncio.Future[Any], stopped: StopSignal, turn: Turn, unanswered: Iterable[str]
) -> None:
    """Until the graph's next chunk, or the stop while the tools step is not under way (none
    of the turn's calls in flight, and none of the model's calls still ``unanswered`` begun:
    the model's step, or a node before the tools, is what runs, and it is cancelled). Once the
    tools step is under way, its answers are waited for: the walk resolves the calls, and the
    step ends with them (its update, or its node's end event, which comes after the last
    call's own events)."""
    await stopped.race(step)
    if step.done():
        return
    if not turn.in_flight and not any(c in turn.calls for c in unanswered):
        return
    await asyncio.wait((step,))


@dataclass
class Seen:
    """What a run's stream has said so far: the tool calls the model's last message asked for,
    their answers (a tools step may come as one update, a ``ToolNode``'s, or one per call,
    ``create_agent``'s), and the approvals it paused for (``interrupt()``)."""

    asked: set[str] = field(default_factory=set)
    answered: dict[str, ToolMessage] = field(default_factory=dict)
    interrupts: list[Any] = field(default_factory=list)

    def take(self, ns: tuple[str, ...], mode: str, chunk: Any) -> bool:
        """Read one item; True if it is the parent graph's and answered calls."""
        update = update_of(mode, chunk)
        if update is None:
            return False
        if not ns and isinstance(update, dict) and "__interrupt__" in update:
            self.interrupts += update["__interrupt__"]
        return note(update, self.asked, self.answered) and not ns

    @property
    def unanswered(self) -> set[str]:
        return self.asked - self.answered.keys()


#: The mode of a subgraph's item passed on (``until_stopped(nested=True)``): its chunk is the
#: ``(namespace, mode, chunk)`` the graph streamed.
NESTED = "nested"


async def until_stopped(
    stream: AsyncIterator[Any],
    stopped: StopSignal,
    turn: Turn,
    seen: Seen,
    events: bool,
    *,
    nested: bool = False,
    v2: bool = False,
) -> AsyncIterator[tuple[str, Any]]:
    """The parent graph's ``(mode, chunk)`` items (a subgraph's are read, and passed on as
    ``(NESTED, (namespace, mode, chunk))`` only if ``nested``), until
    the run ends, or the stop ends it: at once if nothing of the tools step is under way (the
    model's step, or a node before the tools, is cancelled), else after the parent's tools step
    answered every call (or the run drained: a subgraph's step). A drain the stop did not ask
    for (the caller's own) is raised."""
    while True:
        step = asyncio.ensure_future(stream.__anext__())
        await first(step, stopped, turn, seen.unanswered)
        if not step.done():  # stopped with nothing under way: the step running is cancelled
            step.cancel()
            await asyncio.gather(step, return_exceptions=True)
            return
        try:
            ns, mode, chunk = item(step.result(), events, v2)
        except StopAsyncIteration:
            return
        except GraphDrained:
            if stopped.is_set():
                return  # the stop's own drain
            raise
        if not ns:
            yield mode, chunk
        elif nested:
            yield NESTED, (ns, mode, chunk)
        data = chunk.get("data") if v2 else chunk  # a v2 part's chunk is its data
        if seen.take(ns, mode, data) and stopped.is_set() and not seen.unanswered:
            return  # the tools step the stop reached is written: end before the model
