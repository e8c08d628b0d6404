"""What a tool gets from the host: its request, a way to report, and its cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from turnwatch.runtime.clock import REAL, Clock
from turnwatch.runtime.protocol import (
    AbortRequest,
    ExecuteRequest,
    HostMessage,
    HostResult,
    MessageCallback,
    Progress,
)

if TYPE_CHECKING:
    from turnwatch.runtime.tools.containment import Containers

T = TypeVar("T")

_MADE = threading.Lock()  # guards a flag's event, made only for a thread that waits


class CancelFlag:
    """A call's cancellation as worker threads read it: ``threading.Event``'s ``is_set``,
    ``set`` and ``wait``, made in a fraction of its cost.

    Every tool call has one and almost none is ever waited on, so the ``threading.Event``
    (a ``Condition``, its lock, a deque) is made only for a thread that waits: ``is_set`` reads
    a bool, which the GIL keeps whole across threads."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True  # before the event is read: a waiter that made it after sees this
        if self._event is not None:
            self._event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until set (or ``timeout`` seconds); whether it is set."""
        if self._set:
            return True
        with _MADE:
            if self._event is None:
                self._event = threading.Event()
        if self._set:  # set while the event was made, before set() could see it
            self._event.set()
        return self._event.wait(timeout)


@dataclass(eq=False)
class ToolContext:
    """One call as the host runs it. The loop-side fields are touched only on the event loop."""

    request: ExecuteRequest
    # Report to the runtime; call on the loop (from a worker thread: notify_threadsafe).
    notify: MessageCallback
    loop: asyncio.AbstractEventLoop
    # Set by tools.abort; worker threads read it (is_set, wait: as a threading.Event's).
    cancelled: CancelFlag = field(default_factory=CancelFlag)
    # The same, awaitable on the loop.
    abort_arrived: asyncio.Event = field(default_factory=asyncio.Event)
    # The abort request, once one arrived (its grace window bounds process termination).
    abort: AbortRequest | None = None
    # The host's process containment (process tools only; None outside a host).
    containers: Containers | None = None
    # The clock the grace window is measured on (the runtime's, in tests a manual one).
    clock: Clock = REAL
    # Called once, on the loop, when the first tools.abort arrives: what a tool cancels then
    # (an integration's framework handler), without a task per call waiting for the event.
    on_cancel: list[Callable[[], object]] = field(default_factory=list)

    @property
    def args(self) -> Mapping[str, Any]:
        return self.request.args

    def cancel(self, request: AbortRequest) -> None:
        """Deliver tools.abort (on the loop)."""
        first = self.abort is None
        if first:
            self.abort = request
        self.cancelled.set()
        self.abort_arrived.set()
        if first:
            for callback in self.on_cancel:
                callback()

    def notify_threadsafe(self, message: HostMessage, *, after_cancel: bool = False) -> None:
        """Report from a worker thread.

        After a cancel nothing more goes out (a raced call's progress stops at the stop), unless
        ``after_cancel``: an awaited call's heartbeat goes on until its result.
        """
        if self.cancelled.is_set() and not after_cancel:
            return
        # RuntimeError: the loop closed under a worker that ran on; nothing to tell anyone.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._deliver, message, after_cancel)

    def _deliver(self, message: HostMessage, after_cancel: bool) -> None:
        if after_cancel or not self.cancelled.is_set() or not isinstance(message, Progress):
            self.notify(message)


ToolFn = Callable[[ToolContext], Awaitable[HostResult]]


def run_in_worker(ctx: ToolContext, fn: Callable[[], T], name: str) -> asyncio.Future[T]:
    """Run blocking ``fn`` in a daemon thread; its future resolves on the loop.

    Not ``asyncio.to_thread``: a raced worker may block for minutes (a hung mount), and the default
    executor would make interpreter shutdown wait for it. A daemon thread cannot hold the exit.
    """
    fut: asyncio.Future[T] = ctx.loop.create_future()

    def settle(result: T | None, exc: BaseException | None) -> None:
        if fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)  # type: ignore[arg-type]  # result is T when exc is None

    def body() -> None:
        result: T | None = None
        error: BaseException | None = None
        try:
            result = fn()
        except BaseException as exc:
            error = exc
        # RuntimeError: the loop is gone; nobody waits for this result any more.
        with contextlib.suppress(RuntimeError):
            ctx.loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=body, name=name, daemon=True).start()
    return fut
