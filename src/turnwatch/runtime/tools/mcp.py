"""MCP tools over stdio: class ``extension``, policy ``await``.

On a stop the host sends ``notifications/cancelled`` for the in-flight request itself and keeps
waiting for the outcome, because an MCP call that already started is never locally abandoned.
The SDK cannot do both (abandoning the awaiting task sends the cancel but forgets the request), so
the call is sent under an id minted here, which the cancel then names. Servers differ after a
cancel; each case is recorded as it is: a late real result (``completed_after_stop``), an error
reply (``cancelled_by_server``), or no reply at all (the call stays awaited; the watchdog's
``await_overdue`` reports it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import MCPError

from turnwatch.runtime.protocol import HostResult, HostStatus, Progress, Started
from turnwatch.runtime.tools.context import ToolContext
from turnwatch.runtime.tools.mcp_stderr import StderrTail

#: Prefix of an MCP tool's name in the runtime: ``mcp__{server}__{tool}``.
PREFIX = "mcp__"
_ids = itertools.count(1)


@dataclass(frozen=True)
class McpServerConfig:
    """An MCP server started by command (stdio)."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    #: Where the server's stderr goes (its own diagnostics); None keeps its last 1,000 bytes
    #: only (a server that fails to start has them said in the error), the rest dropped.
    stderr_log: str | None = None
    #: How long the server may take to answer ``initialize`` and ``tools/list``.
    start_timeout_s: float = 30.0


class McpServer:
    """One connected server. A task of its own owns the SDK's contexts for their whole life."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.session: ClientSession | None = None
        self.tools: list[types.Tool] = []
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        #: The server's stderr: a file it was given, or the tail kept of it.
        self._stderr: tuple[TextIO, StderrTail | None] | None = None

    async def start(self) -> McpServer:
        """Start the server and list its tools; or a ``RuntimeError`` that says why it could
        not (what the server said on stderr included), its process ended."""
        cfg = self.config
        # A real file: the child needs a descriptor (a captured sys.stderr may have none).
        tail: StderrTail | None = None
        if cfg.stderr_log:
            # One open per server start (ASYNC230), closed by close() or below (SIM115).
            errlog: TextIO = open(cfg.stderr_log, "a")  # noqa: SIM115, ASYNC230
        else:
            tail = StderrTail(asyncio.get_running_loop())
            errlog = tail.file
        self._stderr = (errlog, tail)
        self._task = asyncio.ensure_future(self._run(errlog))
        try:
            await asyncio.wait_for(asyncio.shield(self._ready.wait()), cfg.start_timeout_s)
        except TimeoutError:
            self._error = TimeoutError(f"no answer to initialize within {cfg.start_timeout_s:g} s")
            self._task.cancel()  # the SDK's contexts end the server's process
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._error is not None:
            said = tail.text() if tail is not None else ""
            self._close_stderr()
            where = f"; its stderr ends: {said}" if said else ""
            where = f"; its stderr is in {cfg.stderr_log}" if cfg.stderr_log else where
            raise RuntimeError(
                f"MCP server {cfg.name!r} ({cfg.command}) failed to start: "
                f"{_why(self._error)}{where}"
            ) from self._error
        return self

    async def _run(self, errlog: TextIO) -> None:
        params = StdioServerParameters(
            command=self.config.command,
            args=list(self.config.args),
            env=dict(self.config.env) or None,
        )
        try:
            async with (
                stdio_client(params, errlog) as (read, write),
                ClientSession(read, write) as s,
            ):
                await s.initialize()
                self.tools = list((await s.list_tools()).tools)
                self.session = s
                self._ready.set()
                await self._closing.wait()
        except Exception as exc:  # reported by start(), or to calls still waiting
            self._error = self._error or exc
        finally:
            self.session = None
            self._ready.set()

    def _close_stderr(self) -> None:
        if self._stderr is None:
            return
        errlog, tail = self._stderr
        self._stderr = None
        if tail is not None:
            tail.close()
        else:
            errlog.close()

    async def close(self) -> None:
        self._closing.set()
        if self._task is not None:
            await self._task
            self._close_stderr()

    def names(self) -> dict[str, str]:
        """Runtime tool name → the server's tool name."""
        return {f"{PREFIX}{self.config.name}__{t.name}": t.name for t in self.tools}

    async def call(self, ctx: ToolContext, tool: str) -> HostResult:
        """Call ``tool``; on tools.abort, send notifications/cancelled and keep waiting."""
        session = self.session
        if session is None:
            return HostResult(HostStatus.ERROR, error=f"MCP server {self.config.name!r} is gone")
        ctx.notify(Started())  # the request is written once this task next yields
        try:
            raw = await send_call(ctx, session, tool, dict(ctx.args))
        except MCPError as exc:
            if answers_the_cancel(exc, ctx):
                return HostResult(HostStatus.CANCELLED_BY_SERVER, error=exc.message)
            return HostResult(HostStatus.ERROR, error=f"MCP error {exc.code}: {exc.message}")
        return _outcome(raw)


def _why(exc: BaseException) -> str:
    """What went wrong, said by the exceptions themselves: an exception group (the SDK's task
    groups) by each of its leaves, not as "unhandled errors in a TaskGroup"."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(_why(e) for e in exc.exceptions))
    if isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED:
        return "it closed its end before answering (exited?)"
    return str(exc) or type(exc).__name__


def answers_the_cancel(exc: MCPError, ctx: ToolContext | None) -> bool:
    """An error reply to a call the stop cancelled is the server's answer to the cancel (the
    call ``aborted``), not a failure; a connection that closed is neither."""
    return ctx is not None and ctx.cancelled.is_set() and exc.code != types.CONNECTION_CLOSED


async def send_call(
    ctx: ToolContext | None,
    session: ClientSession,
    tool: str,
    arguments: dict[str, Any],
    *,
    answers: Mapping[str, Any] | None = None,
    state: str | None = None,
) -> dict[str, Any]:
    """Send ``tools/call`` for the call ``ctx`` runs (None: no call of a turn): its raw result,
    or the ``MCPError`` of an error reply. ``answers`` and ``state``: the round that answers a
    server's question (an ``input_required`` result's ``inputRequests``, keyed as they were,
    and its ``requestState``, echoed).

    When tools.abort arrives first, ``notifications/cancelled`` naming this very request is
    sent, and the result is still awaited (the ADR's ``await`` policy): a late real result, an
    error reply, or none. The request is sent under an id minted here, because the SDK offers
    no public way to learn a request's id before its result arrives; the dispatcher's
    ``CallOptions["request_id"]`` is that way (mcp 2.x, pinned in pyproject). A caller whose
    own task is cancelled (not a stop) abandons the request, and the SDK tells the server so.
    """
    rid = mint_request_id()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if ctx is not None:
            ctx.notify(Progress(text=message or "", progress=progress, total=total))

    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if answers is not None:
        params["inputResponses"] = dict(answers)
    if state is not None:
        params["requestState"] = state
    data = {"method": "tools/call", "params": params}
    opts = CallOptions(request_id=rid, on_progress=on_progress)
    # Stamped as the SDK stamps its own requests: on a 2026-07-28 connection each request says
    # in its _meta which version, client and capabilities it speaks for (a server reads no
    # other; unstamped, ours looked like a client that can answer no question), and over HTTP
    # the version header goes with it.
    session._stamp(data, opts)
    return await cancelled_at_stop(
        ctx, session, rid, session._dispatcher.send_raw_request("tools/call", params, opts)
    )


def mint_request_id() -> str:
    """A request id of turnwatch's own, which a stop's ``notifications/cancelled`` can name;
    not an integer, so it never collides with the SDK's own ids."""
    return f"turnwatch-{next(_ids)}"


async def cancelled_at_stop(
    ctx: ToolContext | None,
    session: ClientSession,
    rid: str,
    sending: Awaitable[dict[str, Any]],
) -> dict[str, Any]:
    """Await ``sending`` (the request ``rid``); when ``ctx``'s tools.abort comes first, send
    ``notifications/cancelled`` naming ``rid`` and keep awaiting it. ``ctx`` None: no call of a
    turn, no stop to watch for. Our own task cancelled abandons the request (the SDK forgets
    it, and tells the server so)."""
    request = asyncio.ensure_future(sending)
    try:
        if ctx is not None:
            await _cancel_at_stop(ctx, session, rid, request)
        return await request
    finally:
        request.cancel()


async def _cancel_at_stop(
    ctx: ToolContext, session: ClientSession, rid: str, request: asyncio.Future[Any]
) -> None:
    """Wait for ``request`` or the stop, whichever comes first; at the stop, tell the server."""
    stop = asyncio.ensure_future(ctx.abort_arrived.wait())
    try:
        await asyncio.wait((request, stop), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if not request.done():
        with contextlib.suppress(Exception):  # the server may be gone: keep waiting
            await session.send_notification(
                types.CancelledNotification(
                    params=types.CancelledNotificationParams(request_id=rid, reason="user stop")
                )
            )


def _outcome(raw: dict[str, Any]) -> HostResult:
    result = types.CallToolResult.model_validate(raw)
    text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
    if result.is_error:
        return HostResult(HostStatus.ERROR, text, error=text or "tool error")
    return HostResult(HostStatus.OK, text, data=result.structured_content)
