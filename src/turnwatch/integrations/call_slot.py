"""One framework call between its framework and the host (its :class:`Slot`), and what a tool's
body runs under it: a command (:func:`run_command`, :func:`run_command_sync`: contained, ended at
a stop within the grace window) and an MCP tool call (:func:`call_mcp_tool`, or a framework's own
through a session :func:`tap_session` tapped: cancelled at its server at a stop, and awaited).
:mod:`turnwatch.integrations.wrappers` exports these names too.
Nothing here imports a framework.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple

from mcp import ClientSession
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import MCPError

from turnwatch.runtime.handle import CallHandle
from turnwatch.runtime.model import TurnwatchError
from turnwatch.runtime.protocol import HostResult, HostStatus
from turnwatch.runtime.tools.context import ToolContext
from turnwatch.runtime.tools.mcp import (
    answers_the_cancel,
    cancelled_at_stop,
    mint_request_id,
    send_call,
)
from turnwatch.runtime.tools.process import run_process

_log = logging.getLogger("turnwatch.integrations")

__all__ = [
    "CURRENT",
    "CommandAbortedError",
    "CommandResult",
    "Handler",
    "Slot",
    "call_mcp_tool",
    "run_command",
    "run_command_sync",
    "tap_session",
]


#: A framework's handler of one call: called with its validated arguments.
Handler = Callable[[Any], Any]


class CommandAbortedError(TurnwatchError):
    """A stop ended what a hosted tool started: the command :func:`run_command` started, or the
    MCP request :func:`call_mcp_tool` sent (its tool is being released)."""


class CommandResult(NamedTuple):
    """What a command printed (stdout and stderr, in order) and how it exited."""

    output: str
    exit_code: int | None


@dataclasses.dataclass(eq=False)
class Slot:
    """One call between the framework and the host: the handler, and what it returned."""

    # The framework's handler, its validated arguments, and the context it was called in.
    handler: asyncio.Future[tuple[Handler, Any, contextvars.Context]]
    ctx: ToolContext | None = None
    value: Any = None
    error: BaseException | None = None
    aborted: HostResult | None = None
    handle: CallHandle | None = None
    #: What the handler may raise to pause its call (:meth:`Dispatcher.run`'s ``pauses``).
    pauses: tuple[type[BaseException], ...] = ()


CURRENT: contextvars.ContextVar[Slot | None] = contextvars.ContextVar(
    "turnwatch_call", default=None
)


async def run_command(
    argv: Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None
) -> CommandResult:
    """Run a command from a ``process`` tool: contained, ended at a stop within the grace window.

    Raises :class:`CommandAbortedError` when a stop ended it (the call's result, with the output
    collected until then, is the ledger's).
    """
    slot = CURRENT.get()
    if slot is None or slot.ctx is None:
        raise RuntimeError("run_command runs in a process tool of a wrapped agent")
    result = await run_process(slot.ctx, argv, cwd=cwd, env=env)
    if result.status is HostStatus.ABORTED:
        slot.aborted = result
        raise CommandAbortedError(result.error or "stopped")
    return CommandResult(result.output, (result.data or {}).get("exit_code"))


def run_command_sync(
    argv: Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None
) -> CommandResult:
    """:func:`run_command` for a sync ``process`` tool, which its framework runs in a thread:
    the command is started and ended by the event loop, exactly as :func:`run_command` does,
    and this thread waits for it. Where a wrapper runs sync process tools (Google ADK's).

    Raises :class:`CommandAbortedError` when a stop ended it."""
    slot = CURRENT.get()
    if slot is None or slot.ctx is None:
        raise RuntimeError("run_command_sync runs in a process tool of a wrapped agent")
    loop = slot.handler.get_loop()
    try:
        on_loop = asyncio.get_running_loop() is loop
    except RuntimeError:
        on_loop = False
    if on_loop:
        raise RuntimeError("run_command_sync would block the event loop: await run_command")
    # The coroutine runs in this thread's context (copied when the loop is handed it): the
    # call's slot goes with it.
    return asyncio.run_coroutine_threadsafe(run_command(argv, cwd=cwd, env=env), loop).result()


async def call_mcp_tool(
    session: ClientSession,
    tool: str,
    arguments: dict[str, Any],
    *,
    answers: Mapping[str, Any] | None = None,
    state: str | None = None,
) -> dict[str, Any]:
    """Call an MCP tool from a hosted tool's body (:data:`HOSTED_KEY`): the raw result (an
    ``input_required`` one too: ``answers`` and ``state`` answer it, see ``send_call``).

    In a wrapped call, the stop's ``tools.abort`` sends ``notifications/cancelled`` naming this
    very request, and the result is still awaited (an ``extension`` call's policy); a
    ``read_only`` call the stop discards abandons the request, and the server is told so too.
    An error reply to a call the stop cancelled is the server's answer to the cancel:
    :class:`CommandAbortedError` (the call is ``aborted``). Outside a wrapped call, a plain
    ``tools/call``; an error reply raises the SDK's ``MCPError``.
    """
    slot = CURRENT.get()
    ctx = slot.ctx if slot is not None else None
    try:
        return await send_call(ctx, session, tool, arguments, answers=answers, state=state)
    except MCPError as exc:
        if slot is None or not answers_the_cancel(exc, ctx):
            raise
        slot.aborted = HostResult(HostStatus.CANCELLED_BY_SERVER, error=exc.message)
        raise CommandAbortedError(f"the MCP server ended it at the stop: {exc.message}") from exc


#: Marks a session's dispatcher :func:`tap_session` tapped, so it is tapped once.
_TAPPED = "_turnwatch_tapped"
#: Dispatcher types found untappable, each said once.
_UNTAPPABLE: set[type[Any]] = set()
#: JSON-RPC's "request cancelled" (as servers answer a cancelled request): the code of a request
#: a stopped call would have sent, and did not.
_NOT_SENT = -32800


def tap_session(session: ClientSession) -> None:
    """Make the ``tools/call`` requests ``session`` sends from a hosted call's body stoppable
    at their server, as :func:`call_mcp_tool`'s are: for a framework whose own MCP client sends
    them (the OpenAI Agents SDK's ``MCPServer``), with everything that client does around the
    request (its meta, retries, result conversion) left as it is.

    Each such request goes under an id minted here, which the stop's ``notifications/cancelled``
    names, and is still awaited; an error reply to the cancel ends the call ``aborted``; and
    once the stop came no request of the call is sent (not its first, if the stop came before
    it, nor a client's own retry, which would be a call the stop never saw): the call is
    ``aborted``. Requests sent outside a wrapped call are untouched. Idempotent.
    """
    # The dispatcher is where a request's id can be given (``CallOptions``; mcp 2.x, pinned).
    dispatcher: Any = getattr(session, "_dispatcher", None)
    if getattr(dispatcher, _TAPPED, False):
        return
    send = getattr(dispatcher, "send_raw_request", None)
    try:
        if send is None:
            raise AttributeError("send_raw_request")
        dispatcher.send_raw_request = _stoppable(session, send)
        setattr(dispatcher, _TAPPED, True)
    except AttributeError:
        # An mcp of another shape than the one pinned: its calls are still awaited at a stop,
        # as every extension call is, but their server is not told. Said once, not raised: a
        # run must not fail for it.
        if type(dispatcher) not in _UNTAPPABLE:
            _UNTAPPABLE.add(type(dispatcher))
            _log.warning(
                "turnwatch: cannot tap this MCP session (%s): at a stop its calls are awaited "
                "without telling their server",
                type(dispatcher).__name__,
            )


def _stoppable(
    session: ClientSession, send: Callable[..., Awaitable[dict[str, Any]]]
) -> Callable[..., Awaitable[dict[str, Any]]]:
    """``send`` (a dispatcher's ``send_raw_request``), its ``tools/call`` requests sent from a
    hosted call's body made stoppable (see :func:`tap_session`)."""

    async def send_raw_request(
        method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None, **kw: Any
    ) -> dict[str, Any]:
        slot = CURRENT.get()
        if method != "tools/call" or slot is None or slot.ctx is None:
            return await send(method, params, opts, **kw)
        ctx = slot.ctx
        if ctx.cancelled.is_set():  # its first request, or a retry of the client's own
            if slot.aborted is None:
                slot.aborted = HostResult(HostStatus.ABORTED, error="stopped before it was sent")
            raise MCPError(_NOT_SENT, "stopped: turnwatch sends no request of this call")
        rid = mint_request_id()
        sent: CallOptions = {**(opts or {}), "request_id": rid}
        try:
            return await cancelled_at_stop(ctx, session, rid, send(method, params, sent, **kw))
        except MCPError as exc:
            if answers_the_cancel(exc, ctx):
                slot.aborted = HostResult(HostStatus.CANCELLED_BY_SERVER, error=exc.message)
            raise

    return send_raw_request
