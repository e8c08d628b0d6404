"""LangGraph, wrapped: the ADR's stop for graphs whose tools run in a ``ToolNode``, and a thread
history that stays valid after it. Requires the ``langgraph`` extra.

A native cancel of a running graph (its task cancelled) leaves a tool's processes running, the
checkpoint holding an ``AIMessage`` whose tool calls have no answer, and a resume that runs a
mutating tool again (``../shared/frameworks-next.md``). Wrapped:

- :func:`tool_node` is a ``ToolNode`` whose calls are turnwatch calls of the run's turn (its
  ``awrap_tool_call`` hook), each by its class: ``turnwatch_class`` in the tool's ``metadata``
  (``read_only``, ``process``, ``mutating``, ``extension``; unset: ``default_class``), an
  unknown class refused when the node is built. A ``process`` tool is async and starts its
  commands with :func:`turnwatch.integrations.wrappers.run_command` (contained, ended within the
  grace window).
- :class:`StoppableGraph` runs the compiled graph as one turn of a session
  (``ainvoke``, ``astream``, ``astream_events``, each with ``session=``);
  ``await runtime.abort(session)`` is the stop. Calls in flight are walked by class: read-only
  ones discarded, process ones ended within the grace window, mutating and extension ones
  awaited. **Every call the stop reached gets its ``ToolMessage``** (discarded: stopped by the
  user; aborted: what it printed before it was ended; completed after the stop: its real
  result; refused: not run), the tools step is written to the thread's checkpoint, and the run
  ends there, before the model is asked again: no call is left without an answer, and a resume
  never runs again a call that ran. A stop while the model runs (no call in flight) cancels
  the run at once: the checkpoint is then the last step's, whose calls were all answered.
- A run whose task is cancelled from outside is a stop too (source ``cancel``).

``create_agent``'s agents: :class:`turnwatch.integrations.langgraph_middleware.TurnwatchMiddleware`
in its ``middleware``, the agent run in a :class:`StoppableGraph`.

Approvals (``HumanInTheLoopMiddleware``'s interrupt): the turn waits on them as pending
permissions, a stop cancels them, a late approval is refused
(:mod:`turnwatch.integrations.langgraph_approvals`).

``astream_events`` (v2) is stopped as ``astream`` is.

A subgraph whose tools run in a :func:`tool_node` is stopped with its parent: the stop asks
LangGraph's own ``RunControl`` to drain, so no step begins after the one under way, in the
graph or its subgraphs (langgraph #5682: a subgraph kept running after a cancel).

A tool that asks its user itself (``interrupt()`` in its body): its run until the question is a
completed call, the graph's run pauses, and the tool's going on is a permission of the turn,
which waits on it; the answer (``Command(resume=…)``) grants it, and the tool runs again from
its start as LangGraph runs it, under its own call id (``<id>:resumed``). After a stop the answer
is refused and the tool never goes on; its call is answered "not run".

A thread a run left in its tools step without their answers (cancelled natively, or its
process killed) would have them run again by LangGraph on a resume: before a wrapped run goes on
from it, each is answered :data:`LEFT` ("not known": it may have run), unless an approval or a
breakpoint (``interrupt_before``) accounts for the pause.

A ``ToolNode`` the application built (``ToolNode(tools)``, ``create_react_agent``'s), in the
graph or any subgraph LangGraph can see (``get_subgraphs``), is wrapped in place when the
:class:`StoppableGraph` is made (:func:`turnwatch.integrations.langgraph_nodes.adopt_tool_nodes`):
left as it was, the stop found no call of it, reported the turn settled at once, and the native
cancel left its tools' processes running and its calls unanswered. Tools run in a node of
another kind are not seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import OrderedDict
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.errors import GraphDrained
from langgraph.runtime import RunControl
from langgraph.types import Command

from turnwatch.integrations import langgraph_approvals as approvals
from turnwatch.integrations import langgraph_checkpoints as checkpoints
from turnwatch.integrations import langgraph_stream as stream_read
from turnwatch.integrations.langgraph_checkpoints import LEFT, stopped_words
from turnwatch.integrations.langgraph_nodes import adopt_tool_nodes, tool_node
from turnwatch.integrations.wrappers import (
    CLASS_KEY,
    RUN_TURN,
    ToolClassError,
    declared_class,
    dispatcher,
    join_current_trace,
    stop_on_cancel,
)
from turnwatch.runtime.model import StopSource, ToolClass, TurnOutcome
from turnwatch.runtime.retention import MAX_TOMBSTONES
from turnwatch.runtime.runtime import Runtime
from turnwatch.runtime.turn import Turn

__all__ = [
    "CLASS_KEY",
    "LEFT",
    "StoppableGraph",
    "ToolClassError",
    "stopped_words",
    "tool_node",
]

#: Sessions stopped while their approvals waited whose asked calls a graph keeps, to refuse a
#: late resume (a few hundred bytes each): as many as the runtime keeps tombstones. Past it, a
#: resume of the oldest is LangGraph's own, as after a restart.
MAX_STOPPED_WAITS = MAX_TOMBSTONES


class StoppableGraph:
    """A compiled LangGraph graph whose runs stop the ADR's way on ``runtime``: its tools in a
    :func:`tool_node`, or in a ``ToolNode`` of its own (in the graph or a subgraph), whose calls
    are made turnwatch calls in place (tools of no declared class: ``default_class``)."""

    def __init__(
        self,
        graph: Any,
        runtime: Runtime,
        *,
        default_class: ToolClass | str = ToolClass.MUTATING,
    ) -> None:
        default = declared_class("default_class", {CLASS_KEY: default_class}, ToolClass.MUTATING)
        adopt_tool_nodes(graph, runtime, default)
        self.graph, self.runtime = graph, runtime
        self.dispatch = dispatcher(runtime.host, "StoppableGraph")
        # Its subgraphs' updates are read only if it has any: streaming them costs every call
        # of a graph without (about 1.4 % of LangGraph's own per-call cost, measured).
        self.nested = bool(list(getattr(graph, "get_subgraphs", list)()))
        #: Sessions whose turn waits on approvals (``langgraph_approvals``): its resume goes on.
        self.awaiting: dict[str, approvals.Awaiting] = {}
        #: Sessions stopped while their approvals waited, oldest first: a late resume is
        #: refused from what is kept of them (bounded, :data:`MAX_STOPPED_WAITS`).
        self.stopped_waits: OrderedDict[str, approvals.Awaiting] = OrderedDict()

    async def ainvoke(self, input: Any, config: Any = None, *, session: str, **kwargs: Any) -> Any:
        """``graph.ainvoke`` as one turn of ``session``: the final state, or the state the stop
        left (the tools step it reached written, the model not asked again). A run paused for
        approvals returns its state with ``__interrupt__``, as LangGraph's, its turn left
        waiting; ``ainvoke(Command(resume=…), config, session=)`` answers them and goes on."""
        if kwargs.get("version", "v1") != "v1":
            raise TypeError("StoppableGraph.ainvoke returns the v1 state (version='v2': not read)")
        last: Any = None
        stopped = False
        interrupts: list[Any] = []
        async for mode, chunk in self._run(input, config, session, kwargs):
            if mode == "values":
                last = chunk
            elif mode == "stopped":
                stopped = True
            elif mode == "updates" and isinstance(chunk, dict) and "__interrupt__" in chunk:
                interrupts += chunk["__interrupt__"]
        if interrupts and isinstance(last, dict):
            return {**last, "__interrupt__": tuple(interrupts)}
        if stopped and config is not None and getattr(self.graph, "checkpointer", None):
            # What the stop left, as the thread's checkpoint holds it (the values chunk of the
            # tools step may not have come before the run ended).
            return (await self.graph.aget_state(config)).values
        return last

    async def astream(
        self,
        input: Any,
        config: Any = None,
        *,
        session: str,
        stream_mode: str | Sequence[str] | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[Any, None]:
        """``graph.astream`` as one turn of ``session``: the chunks of ``stream_mode`` (the
        graph's own default if None; a list gives ``(mode, chunk)`` pairs, as LangGraph's), up
        to where a stop ends the run: after the tools step it reached, whose update carries
        every call's answer, or at once if it came while the model ran. With
        ``subgraphs=True`` a subgraph's chunks come too, each with its namespace, as
        LangGraph's: ``(namespace, chunk)``, or ``(namespace, mode, chunk)`` for a list; with
        ``version="v2"``, LangGraph's ``{"type", "ns", "data"}`` parts, as it streams them."""
        version = kwargs.get("version", "v1")
        if version not in ("v1", "v2"):
            raise TypeError(f"StoppableGraph.astream streams version v1 or v2, not {version!r}")
        v2 = version == "v2"
        subgraphs = bool(kwargs.pop("subgraphs", False))
        if stream_mode is None or isinstance(stream_mode, str):
            single, wanted = True, [str(stream_mode or self.graph.stream_mode)]
        else:
            single, wanted = False, [str(m) for m in stream_mode]
        run = self._run(input, config, session, kwargs, modes=wanted, subgraphs=subgraphs)
        # Closed here, in the reader's task, when the reader leaves: its stop runs at once,
        # not whenever the event loop finalizes an abandoned generator.
        async with contextlib.aclosing(run):
            async for mode, chunk in run:
                ns: tuple[str, ...] = ()
                if mode == stream_read.NESTED:
                    ns, mode, chunk = chunk
                if mode not in wanted:
                    continue
                if v2:
                    yield chunk  # the part whole, its namespace in it
                elif not subgraphs:
                    yield chunk if single else (mode, chunk)
                else:
                    yield (ns, chunk) if single else (ns, mode, chunk)

    async def astream_events(
        self, input: Any, config: Any = None, *, session: str, **kwargs: Any
    ) -> AsyncGenerator[Any, None]:
        """``graph.astream_events`` (``version="v2"``) as one turn of ``session``: its events, up
        to where a stop ends the run, as :meth:`astream`'s chunks (the wrapper reads each
        node's end to see the tools step). A run paused for approvals is waited on only
        through :meth:`ainvoke` and :meth:`astream`."""
        if kwargs.setdefault("version", "v2") != "v2":
            raise TypeError("StoppableGraph.astream_events streams version v2 events")
        run = self._run(input, config, session, kwargs, events=True)
        async with contextlib.aclosing(run):  # as astream's: a reader that leaves stops it
            async for mode, chunk in run:
                if mode == stream_read.EVENT:
                    yield chunk

    async def _run(
        self,
        input: Any,
        config: Any,
        session: str,
        kwargs: dict[str, Any],
        modes: Sequence[str] = ("values",),
        *,
        events: bool = False,
        subgraphs: bool = False,
    ) -> AsyncGenerator[tuple[str, Any], None]:
        """The run's ``(mode, chunk)`` pairs of ``modes``, and of ``updates`` (the wrapper reads
        them to see the tools step), or (``events``) its ``astream_events`` as ``(stream_read.EVENT,
        event)``; then ``("stopped", None)`` if a stop ended it."""
        turn, input = await self._turn(input, config, session, kwargs)
        stopped = stream_read.StopSignal()
        # LangGraph's own cooperative stop: no step begins after the one under way, in the
        # graph and in its subgraphs (a subgraph's model is not asked again after its tools).
        control = kwargs.setdefault("control", RunControl())
        drain = functools.partial(control.request_drain, "stopped by the user")
        turn.on_stop += [stopped.set, drain]
        running = RUN_TURN.set(turn)
        stream = self._open(input, config, kwargs, modes, events, subgraphs)
        seen = stream_read.Seen()
        v2 = not events and kwargs.get("version") == "v2"
        try:
            read = stream_read.until_stopped(
                stream, stopped, turn, seen, events, nested=subgraphs, v2=v2
            )
            async for mode, chunk in read:
                yield mode, chunk
        except (asyncio.CancelledError, GeneratorExit):
            # Cancelled, or its reader left (a ``break``, a closed connection): nobody reads
            # the run any more, and it would go on unread. That is a stop (source ``cancel``).
            self.dispatch.unclaimed(session)
            await stop_on_cancel(self.runtime, turn)
            raise
        except GraphDrained:
            # The caller's drain ended the run at a step's end, resumable, as LangGraph says:
            # the framework's own stop, with the same walk; raised on as LangGraph raises it.
            self.dispatch.unclaimed(session)
            if not turn.stopping:
                await self.runtime.abort(session, source=StopSource.FRAMEWORK, turn=turn.id)
            await turn.finish()
            raise
        except BaseException:
            self.dispatch.unclaimed(session)
            await turn.finish(TurnOutcome.FAILED)
            raise
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()
            turn.on_stop.remove(stopped.set)
            turn.on_stop.remove(drain)
            RUN_TURN.reset(running)
        self.dispatch.unclaimed(session)
        if stopped.is_set():
            # The answers the run's stream carried, written if the checkpoint lacks them: a
            # node's end event comes before its writes are saved, and a cut run wrote none.
            await self._answer_dangling(config, seen.answered)
            yield "stopped", None
        elif seen.interrupts and await self._wait_for_approvals(turn, config, seen.interrupts):
            return  # the turn waits on its approvals: a permission can still be granted
        await turn.finish()

    def _open(
        self,
        input: Any,
        config: Any,
        kwargs: dict[str, Any],
        modes: Sequence[str],
        events: bool,
        subgraphs: bool = False,
    ) -> AsyncGenerator[Any, None]:
        """The graph's own stream: its events (a subgraph's among them), or its chunks of
        ``modes`` and ``updates``, a subgraph's too when it has one (``(namespace, mode,
        chunk)``): the wrapper then sees a subgraph's tools step under way and lets it end."""
        if events:
            return self.graph.astream_events(input, config, **kwargs).__aiter__()  # type: ignore[no-any-return]
        streamed = list(dict.fromkeys(["updates", *modes]))
        return self.graph.astream(  # type: ignore[no-any-return]
            input, config, stream_mode=streamed, subgraphs=self.nested or subgraphs, **kwargs
        ).__aiter__()

    async def _turn(
        self, input: Any, config: Any, session: str, kwargs: dict[str, Any]
    ) -> tuple[Turn, Any]:
        """The run's turn, and its input: a resume of approvals answers them through the
        runtime (one the stop came before, a rejection) and goes on in the turn that waited
        (a new one if the stop settled it); any other input, while approvals wait, abandons
        them: their turn is stopped, and their calls answered "not run" in the thread's
        history before the new input is read."""
        waiting = self.awaiting.pop(session, None) or self.stopped_waits.pop(session, None)
        if waiting is not None and isinstance(input, Command) and input.resume is not None:
            resumed = approvals.answer(self.runtime, self.dispatch, session, waiting, input)
            turn = waiting.turn  # None once a stop settled it
            if resumed is not None and turn is not None and not turn.settled.done():
                return turn, resumed
            if resumed is None:  # a paused tool's answer came after the stop: refused
                await self._answer_dangling(config)  # it never goes on: "not run"
            input = resumed  # None: the run goes on from the answers, to the model
        elif waiting is None and not isinstance(input, Command):
            await self._answer_left(config, kwargs)
        elif waiting is not None:
            if waiting.turn is not None and not waiting.turn.settled.done():
                await self.runtime.abort(session, source=StopSource.FRAMEWORK, turn=waiting.turn.id)
            approvals.let_go(self.dispatch, session, waiting)  # its slots, its resumptions' ids
            await self._answer_dangling(config)
        turn = self.runtime.start_turn(session, parent=RUN_TURN.get())
        # The span the run is called in (the application's, an instrumentation's) is the
        # stop's parent: the stop is in the run's trace. Only its ids: never inputs, outputs.
        join_current_trace(turn)
        return turn, input

    async def _wait_for_approvals(self, turn: Turn, config: Any, interrupts: list[Any]) -> bool:
        """The run paused for approvals: each call they ask about, a call of the turn with its
        prompt open; True if any (the turn then waits)."""
        if config is None or not getattr(self.graph, "checkpointer", None):
            return False
        state = await self.graph.aget_state(config)
        messages = state.values.get("messages", []) if isinstance(state.values, dict) else []
        asked = approvals.asked_calls(interrupts, messages)
        asked += approvals.resumptions(self.dispatch, turn.session.id)
        if not asked:
            return False
        waiting = approvals.ask(turn, self.dispatch, asked)
        self.awaiting[turn.session.id] = waiting
        self.stopped_waits.pop(turn.session.id, None)  # an older wait, over now
        turn.settled.add_done_callback(functools.partial(self._stopped, turn.session.id, waiting))
        return True

    def _stopped(self, session: str, waiting: approvals.Awaiting, _settled: object) -> None:
        """``waiting``'s turn settled before a run resumed it (a stop): the turn and its slots
        are let go; what refuses a late resume (the calls asked about) is kept, for the
        :data:`MAX_STOPPED_WAITS` sessions stopped last. Kept whole, a user who clicked Stop and
        never came back left the turn (every call, every result) for the graph's life."""
        if self.awaiting.get(session) is not waiting:
            return  # resumed, or given up for a new input: over
        del self.awaiting[session]
        approvals.let_go(self.dispatch, session, waiting)
        self.stopped_waits[session] = waiting
        while len(self.stopped_waits) > MAX_STOPPED_WAITS:
            self.stopped_waits.popitem(last=False)

    async def _answer_left(self, config: Any, kwargs: dict[str, Any]) -> None:
        """Before a run goes on from a thread's checkpoint: calls of the model's last message
        that no answer, no approval and no breakpoint accounts for were left by a run that
        ended in their step (cancelled natively, or its process killed); LangGraph would run
        them again. Each is answered instead, "not known", as the tools step would have."""
        if config is None or not getattr(self.graph, "checkpointer", None):
            return
        state = await self.graph.aget_state(config)
        before = kwargs.get("interrupt_before") or getattr(self.graph, "interrupt_before_nodes", ())
        if state.interrupts or not state.next:
            return  # an approval waits, or nothing is due
        if before == "*" or set(state.next) & set(before or ()):
            return  # a breakpoint the graph was paused at: the caller resumes it on purpose
        await self._answer_dangling(config, state=state, words=LEFT)

    async def _answer_dangling(
        self,
        config: Any,
        known: dict[str, ToolMessage] | None = None,
        *,
        state: Any = None,
        words: str = "",
    ) -> None:
        """Calls of the model's last message the checkpoint holds no answer for (a stop cut the
        run before their step, or ended it on their step's end event, before its writes were
        saved) get their ``ToolMessage``: the one the run's stream carried (``known``), else
        ``words`` ("not run" by default); written as the tools step would have, so the history
        stays valid."""
        await checkpoints.answer(self.graph, config, known, state=state, words=words)
