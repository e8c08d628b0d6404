"""How a wrapped LangGraph run's stream is read (:class:`~turnwatch.integrations.langgraph.
StoppableGraph`): which chunk ends a tools step, which event ends a node, and the wait for the
next chunk or the stop. Requires the ``langgraph`` extra."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.errors import GraphDrained

from turnwatch.runtime.turn import Turn

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
    """Set once, by the turn's stop (its ``on_stop``); what the reading of a run's stream then
    does is :func:`until_stopped`'s, told by :meth:`then`."""

    __slots__ = ("_set", "_then")

    def __init__(self) -> None:
        self._set = False
        self._then: Callable[[], object] | None = None

    def set(self) -> None:
        self._set = True
        if self._then is not None:
            self._then()

    def is_set(self) -> bool:
        return self._set

    def then(self, fn: Callable[[], object] | None) -> None:
        """Call ``fn`` when the signal is set (None: call nothing)."""
        self._then = fn


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


def _ended(exc: BaseException, cut: asyncio.Task[Any] | None, stopped: StopSignal) -> bool:
    """Whether the read that raised ``exc`` ended the run as it should end (True), or the
    caller must see it (False: re-raise it). ``cut``: the reading task, if the stop cancelled
    its read: however the graph then ended the step, the stop's cancel is taken back, and only
    another's cancel is raised."""
    if cut is not None:
        if cut.uncancel() == 0:
            return True
        if isinstance(exc, asyncio.CancelledError):
            return False
        raise asyncio.CancelledError from exc  # cancelled by another too
    if isinstance(exc, StopAsyncIteration):
        return True
    return isinstance(exc, GraphDrained) and stopped.is_set()  # the stop's own drain


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
    for (the caller's own) is raised.

    The stream is read in the caller's own task, as LangGraph's own ``ainvoke`` reads it: a
    stop with nothing under way cancels that task's wait for the next chunk, and takes its
    cancel back (as ``asyncio.timeout`` does; another's cancel is kept). A task per chunk,
    racing the stop, cost each chunk a task and two turns of the loop, and ``create_agent``
    makes chunks per call (#31). A stop that comes while the caller holds a chunk cancels
    nothing: the next read is not begun.
    """
    reading: asyncio.Task[Any] | None = None  # the task waiting for the graph's next chunk
    cut = False  # the stop cancelled that wait

    def idle() -> bool:
        """Nothing of the tools step under way: none of the turn's calls in flight, and none
        of the model's calls still unanswered begun (the model's step, or a node before the
        tools, runs). Once it is under way, its answers are waited for: the walk resolves the
        calls, and the step ends with them (its update, or its node's end event, which comes
        after the last call's own events)."""
        return not turn.in_flight and not any(c in turn.calls for c in seen.unanswered)

    def cut_if_idle() -> None:
        nonlocal cut
        if reading is not None and not cut and idle():
            cut = True
            reading.cancel()

    loop = asyncio.get_running_loop()
    # A turn of the loop after the stop, as a waiter woken by it would look: the walk has
    # reached the calls by then.
    stopped.then(lambda: loop.call_soon(cut_if_idle))
    try:
        while True:
            if stopped.is_set() and idle():
                return  # stopped with nothing under way: no step is begun
            reading = task = asyncio.current_task()
            assert task is not None
            try:
                raw = await stream.__anext__()
            except BaseException as exc:
                if _ended(exc, task if cut else None, stopped):
                    return
                raise
            finally:
                reading = None
            if cut and task.uncancel() == 0:
                return  # the step ended as the stop cut it (its cancel not seen)
            ns, mode, chunk = item(raw, events, v2)
            if not ns:
                yield mode, chunk
            elif nested:
                yield NESTED, (ns, mode, chunk)
            data = chunk.get("data") if v2 else chunk  # a v2 part's chunk is its data
            if seen.take(ns, mode, data) and stopped.is_set() and not seen.unanswered:
                return  # the tools step the stop reached is written: end before the model
    finally:
        stopped.then(None)
