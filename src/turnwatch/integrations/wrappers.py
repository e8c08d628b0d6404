"""Framework tool calls run as turnwatch calls: the host side every integration shares.

An integration hands each call's framework handler to a :class:`Dispatcher` (registered on the
runtime's :class:`~turnwatch.runtime.LocalHost` under the tool's name) and requests the call on
its turn; the runtime then runs the handler under the policy of the call's class. Nothing here
imports a framework.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import inspect
import warnings
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry import trace

from turnwatch.integrations.call_slot import CURRENT, Handler, Slot

# Moved to call_slot and daemon_threads; still importable from here (the wrappers' public names).
from turnwatch.integrations.call_slot import CommandAbortedError as CommandAbortedError
from turnwatch.integrations.call_slot import CommandResult as CommandResult
from turnwatch.integrations.call_slot import call_mcp_tool as call_mcp_tool
from turnwatch.integrations.call_slot import run_command as run_command
from turnwatch.integrations.call_slot import run_command_sync as run_command_sync
from turnwatch.integrations.call_slot import tap_session as tap_session
from turnwatch.integrations.daemon_threads import DAEMONS as DAEMONS
from turnwatch.integrations.daemon_threads import DaemonExecutor as DaemonExecutor
from turnwatch.runtime.host import LocalHost
from turnwatch.runtime.model import (
    Outcome,
    Phase,
    StopSource,
    ToolClass,
    ToolResult,
    TurnwatchError,
)
from turnwatch.runtime.protocol import HostResult, HostStatus, Started
from turnwatch.runtime.runtime import Runtime
from turnwatch.runtime.tools.context import ToolContext
from turnwatch.runtime.turn import Turn

#: The tool metadata key naming a tool's class.
CLASS_KEY = "turnwatch_class"
#: The tool metadata key (true) of a tool whose body needs its call's stop: an MCP tool that
#: names its request in ``notifications/cancelled`` (:func:`call_mcp_tool`). Its calls run on
#: the host, as a process tool's do, whatever their class.
HOSTED_KEY = "turnwatch_hosted"
#: A framework tool's answer to the runtime: the value itself goes to the framework, and the
#: ledger records outcomes, not values (so no text of it is made, or kept with the call).
_OK = HostResult(HostStatus.OK)
_STARTED = Started()


class UnwrappedToolWarning(TurnwatchError, UserWarning):
    """Something of an agent runs in this process outside any turnwatch call: code an agent's
    code executor runs (ADK's local ones). (The OpenAI Agents SDK's computer tool was named
    too, until it was wrapped.)"""


def warn_unwrapped(who: str, unreached: Mapping[str, str]) -> None:
    """Say what of the agent a stop will neither wait for nor end: ``unreached``, name → kind."""
    if unreached:
        said = ", ".join(f"{n!r} ({k})" for n, k in sorted(unreached.items()))
        warnings.warn(
            f"{who}: {said} run in this process outside any turnwatch call: a stop neither "
            "waits for them nor ends them",
            UnwrappedToolWarning,
            stacklevel=3,
        )


class ToolClassError(TurnwatchError, ValueError):
    """A tool's class is unknown, or its kind cannot honour it (said at construction)."""


def declared_class(name: str, metadata: Mapping[str, Any] | None, default: ToolClass) -> ToolClass:
    """The class ``metadata`` names under :data:`CLASS_KEY`, else ``default``; an unknown one
    is a :class:`ToolClassError` naming the tool and the accepted classes."""
    value = (metadata or {}).get(CLASS_KEY)
    if value is None:
        return default
    try:
        return ToolClass(value)
    except ValueError:
        accepted = ", ".join(c.value for c in ToolClass)
        raise ToolClassError(
            f"tool {name!r}: {CLASS_KEY}={value!r} is not a tool class (accepted: {accepted})"
        ) from None


def require_async_process(name: str, cls: ToolClass, fn: object, run_command: str) -> None:
    """One rule for every wrapper: a ``process`` tool is async and starts its commands with
    ``run_command`` (a sync one could only spawn them uncontained, in a thread a stop cannot
    reach); said at construction, naming the tool and the function to use."""
    if cls is ToolClass.PROCESS and not inspect.iscoroutinefunction(fn):
        raise ToolClassError(
            f"tool {name!r}: a process tool must be async and start its commands with {run_command}"
        )


#: How long past the grace window a wrapped run cancelled from outside waits for its stop's
#: settlement before the cancel goes on (an awaited call may hold the turn longer: it settles
#: when that call returns, as the ADR says, and the cancel is not held for it).
CANCEL_SLACK_S = 1.0


async def stop_on_cancel(runtime: Runtime, turn: Turn) -> None:
    """The task running a wrapped run was cancelled from outside (``wait_for``, a task group,
    Ctrl-C): that is a stop, source ``cancel``. Its walk runs at once; this waits for the turn's
    settlement at most the grace window plus :data:`CANCEL_SLACK_S`, so the cancel stays bounded.
    The caller re-raises the cancellation."""
    if turn.settled.done():
        return
    stop: asyncio.Future[Any] = (
        asyncio.ensure_future(
            runtime.abort(turn.session.id, source=StopSource.CANCEL, turn=turn.id)
        )
        if not turn.stopping
        else asyncio.shield(turn.settled)
    )
    await asyncio.wait((stop,), timeout=runtime.grace_s + CANCEL_SLACK_S)


def join_current_trace(turn: Turn) -> None:
    """The span current here (the application's, an instrumentation's, the framework's own) is
    the parent of ``turn``'s stop, unless the turn has one already: the stop is then in the
    run's trace. Only its ids are taken: never a tool's inputs or outputs."""
    if turn.traceparent is not None:
        return
    span = trace.get_current_span().get_span_context()
    if span.is_valid:
        turn.traceparent = f"00-{span.trace_id:032x}-{span.span_id:016x}-01"


def resumed_id(call: str) -> str:
    """The turnwatch id of a call's run after its tool asked its user (a call id is used once in
    a session, and the tool's first run, until it asked, had it)."""
    return f"{call}:resumed"


#: What a framework's model is told of an approval the stop came before (it is refused).
STOPPED = "The user stopped the turn before this call was approved."


def stopped_words(outcome: Outcome, output: str = "") -> str:
    """What a framework's model is told of a call the stop reached (LangGraph's ``ToolMessage``,
    ADK's function response): the same words in every wrapper."""
    if outcome is Outcome.DISCARDED:
        return "Stopped by the user: this call's result was discarded."
    if outcome is Outcome.REFUSED:
        return "Not run: the user stopped the turn before this call started."
    if outcome is Outcome.ABORTED:
        said = f" It printed, before it was ended:\n{output}" if output else ""
        return "Stopped by the user: this call was ended." + said
    return f"Stopped by the user ({outcome.value})."


#: The turn of the wrapped run whose code runs here: set around each wrapped run, so its tools
#: (which run in the framework's context, copied) see it, and a wrapped run started inside one
#: is that turn's nested run (``Runtime.start_turn(parent=)``).
RUN_TURN: contextvars.ContextVar[Turn | None] = contextvars.ContextVar(
    "turnwatch_run_turn", default=None
)


class Local:
    """A framework's handler as the execution of its call (``Turn.run_call``), run in the
    framework's own task or context; what it returned or raised is kept for the framework."""

    __slots__ = ("args", "error", "handler", "pauses", "value")

    def __init__(
        self, handler: Handler, args: Any, pauses: tuple[type[BaseException], ...] = ()
    ) -> None:
        self.handler, self.args, self.pauses = handler, args, pauses
        self.value: Any = None
        self.error: BaseException | None = None

    async def __call__(self) -> HostResult:
        try:
            self.value = await self.handler(self.args)
        except Exception as exc:  # the framework gets it back as it was raised
            self.error = exc
            return _raised(exc, self.pauses)
        return _OK


class Dispatcher:
    """Registered on a host under each wrapped tool's name; runs the call's framework handler."""

    def __init__(self, host: LocalHost) -> None:
        self.host = host
        self.slots: dict[tuple[str, str], Slot] = {}
        #: Each wrapped tool's class, as its wrapper read it (a call asked for before it runs,
        #: an approval, is requested with it).
        self.classes: dict[str, ToolClass] = {}
        #: Framework calls paused by their own wait on the user (LangGraph's ``interrupt()``
        #: in a tool), by (session, call id): their tool and arguments, until the run that
        #: paused asks for their resumption.
        self.paused: dict[tuple[str, str], tuple[str, Mapping[str, Any]]] = {}
        #: A paused call's resumed run goes under another turnwatch id (an id is used once in a
        #: session): (session, the framework's call id) → that id.
        self.renamed: dict[tuple[str, str], str] = {}
        #: Tools whose calls run on the host whatever their class (:data:`HOSTED_KEY`).
        self.hosted: set[str] = set()

    def unclaimed(self, session: str) -> None:
        """Approved calls of ``session`` the framework never ran (its run ended or failed
        first) end, said so: nothing waits for them for ever."""
        for (sess, cid), slot in list(self.slots.items()):
            if (
                sess == session
                and not slot.handler.done()
                and slot.handle is not None
                and slot.handle.state is not Phase.AWAITING_PERMISSION
            ):
                slot.handler.set_exception(RuntimeError("the framework never ran this call"))
                slot.handler.exception()  # said to the host's execute if it waits, else to none
                del self.slots[(sess, cid)]

    def awaits(self, waiting: dict[str, Turn], turn: Turn) -> None:
        """``turn`` waits for approvals (``waiting``: the wrapper's, by session) until a run
        resumes it. Once it settles (a stop while it waited, or its resumed run's end), it and
        its calls' slots are let go: a later run starts a new turn, and the runtime answers its
        late approvals (LATE, from what it keeps of the turn). Kept, a user who clicked Stop
        and never came back left them here for the runtime's life."""
        waiting[turn.session.id] = turn
        turn.settled.add_done_callback(functools.partial(self._let_go, waiting, turn))

    def _let_go(self, waiting: dict[str, Turn], turn: Turn, _settled: object) -> None:
        session = turn.session.id
        if waiting.get(session) is turn:
            del waiting[session]
        self.release(session, turn.calls)

    def release(self, session: str, calls: Iterable[str]) -> None:
        """The slots of ``calls``, resolved without the framework running them (a stop settled
        their turn, or their user's answer refused them): dropped, a handler still awaited
        cancelled (no framework run takes it), and what renamed a framework call to one of them."""
        ids = set(calls)
        for cid in ids:
            slot = self.slots.pop((session, cid), None)
            if slot is not None and not slot.handler.done():
                slot.handler.cancel()
        if self.renamed:  # and the names their framework calls would have run under
            for key in [k for k, v in self.renamed.items() if k[0] == session and v in ids]:
                del self.renamed[key]

    def add_tools(self, names: Sequence[str]) -> None:
        for name in names:
            fn = self.host.tools.get(name)
            if fn is not None and fn != self.execute:
                raise ToolClassError(f"tool {name!r} is already a tool of this host")
            self.host.register(name, self.execute)

    def host_tool(self, name: str) -> None:
        """Run the calls of tool ``name`` on the host whatever their class (a tool whose body
        needs its call's stop, as an MCP server's request does to be cancelled at its
        server); a name the host has for a tool of its own stays as it was."""
        fn = self.host.tools.get(name)
        if fn is None or fn == self.execute:
            self.host.register(name, self.execute)
            self.hosted.add(name)

    def slot(self, session: str, call_id: str) -> Slot:
        key = (session, call_id)
        if key not in self.slots:
            self.slots[key] = Slot(asyncio.get_running_loop().create_future())
        return self.slots[key]

    async def run(
        self,
        turn: Turn,
        tool: str,
        cls: ToolClass,
        call_id: str,
        args: Mapping[str, Any],
        handler: Handler,
        handler_args: Any,
        pauses: tuple[type[BaseException], ...] = (),
    ) -> tuple[Any, BaseException | None, ToolResult]:
        """One framework tool call, ``handler(handler_args)``, as the turnwatch call ``call_id``
        of ``turn``: what the handler returned, what it raised, and the call's result. What it
        raises of ``pauses`` (the framework's own pause, LangGraph's ``interrupt()``) ends the
        call as completed: it ran until it asked its user, and the framework goes on from there.

        Run in place, no host round trip (``Turn.run_call``): a read-only call in this task,
        the others in a task the framework's cancel cannot reach. A process call (its commands
        need the call's ``ToolContext``), a hosted tool's (:data:`HOSTED_KEY`) or one an
        approval asked for goes through the host, to :meth:`execute`.
        """
        key = (turn.session.id, call_id)
        if key not in self.slots and cls is not ToolClass.PROCESS and tool not in self.hosted:
            local = Local(handler, handler_args, pauses)
            result = await turn.run_call(tool, local, args, call_id=call_id, tool_class=cls)
            return local.value, local.error, result
        slot = self.slot(*key)
        slot.pauses = pauses
        released = slot.handler.done()
        if not released:
            slot.handler.set_result((handler, handler_args, contextvars.copy_context()))
        try:
            handle = slot.handle or turn.request(tool, args, call_id=call_id, tool_class=cls)
            result = await handle.result()
        finally:
            self.slots.pop(key, None)
        if released and result.outcome is Outcome.ABORTED:
            # A stop released the approved call while it waited for the framework to get here:
            # the handler never ran, and its framework is told so ("not run", not "ended").
            result = dataclasses.replace(result, outcome=Outcome.REFUSED)
        return slot.value, slot.error, result

    async def execute(self, ctx: ToolContext) -> HostResult:
        req = ctx.request
        slot = self.slot(req.session, req.call_id)
        slot.ctx = ctx
        if not slot.handler.done():
            # An approved call starts before the resumed run reaches it: wait for its handler,
            # or for the stop (then it never ran, and says so).
            ctx.on_cancel.append(slot.handler.cancel)
            if not await _finished(slot.handler):
                return HostResult(HostStatus.ABORTED, error="stopped before the framework ran it")
        if slot.handler.exception() is not None:
            return HostResult(HostStatus.ERROR, error=str(slot.handler.exception()))
        if ctx.cancelled.is_set():  # stopped before its side effect began: it never starts
            return HostResult(HostStatus.ABORTED, error="stopped before it started")
        handler, args, context = slot.handler.result()
        # Started, with no process to name: a process tool's commands (run_command) then say
        # which they are; one that spawns on its own is recorded as started, and uncontained.
        ctx.notify(_STARTED)
        # The handler runs in the framework's context (its executor, its execute_tool span),
        # not in whatever context started the call (an approved call starts in another run).
        context.run(CURRENT.set, slot)
        task = asyncio.get_running_loop().create_task(handler(args), context=context)
        if req.tool_class is ToolClass.READ_ONLY:
            # Raced: the stop discards it (the walk released the call already) and cancels it.
            ctx.on_cancel.append(task.cancel)
            if not await _finished(task):
                return HostResult(HostStatus.ABORTED, error="discarded at the stop")
        # Process, mutating and extension calls: awaited. A process tool's command ends at the
        # stop within the grace window (run_command); the others run to their end.
        try:
            slot.value = await task
        except Exception as exc:  # the framework gets it back as it was raised
            if slot.aborted is None:
                slot.error = exc
                return _raised(exc, slot.pauses)
        # What the body ran under the call said the stop ended it (a command run_command ended,
        # an MCP server's error reply to the cancel): the call is aborted, whatever the
        # framework made of it (raised, or an error text for its model).
        return _OK if slot.aborted is None else slot.aborted


def _raised(exc: Exception, pauses: tuple[type[BaseException], ...]) -> HostResult:
    """What a handler's ``exc`` makes of its call: completed if it is the framework's pause,
    else failed with its words."""
    if isinstance(exc, pauses):
        return _OK
    return HostResult(HostStatus.ERROR, error=f"{type(exc).__name__}: {exc}")


async def _finished(future: asyncio.Future[Any]) -> bool:
    """Wait for ``future``: False if the stop cancelled it (our own cancellation propagates)."""
    try:
        await asyncio.wait((future,))
    except asyncio.CancelledError:
        future.cancel()
        raise
    return not future.cancelled()


_DISPATCHERS: weakref.WeakKeyDictionary[LocalHost, Dispatcher] = weakref.WeakKeyDictionary()


def dispatcher(host: object, who: str) -> Dispatcher:
    if not isinstance(host, LocalHost):
        raise TypeError(f"{who} runs its tools on a LocalHost, not {type(host).__name__}")
    if host not in _DISPATCHERS:
        _DISPATCHERS[host] = Dispatcher(host)
    return _DISPATCHERS[host]
