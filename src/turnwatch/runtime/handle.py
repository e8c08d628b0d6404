"""What ``Turn.request`` returns: a read-only view of one call, and its result once resolved."""

from __future__ import annotations

import asyncio
import warnings

from turnwatch.runtime.calls import Call
from turnwatch.runtime.model import Outcome, Phase, ToolClass, ToolResult


class CallHandle:
    """What ``Turn.request`` returns: the call id at once, the result when it is resolved.

    Read-only: the call's state belongs to the runtime.
    """

    __slots__ = ("_call",)

    def __init__(self, call: Call) -> None:
        self._call = call

    @property
    def call_id(self) -> str:
        return self._call.call_id

    @property
    def session(self) -> str:
        return self._call.session

    @property
    def tool(self) -> str:
        return self._call.tool

    @property
    def tool_class(self) -> ToolClass:
        return self._call.tool_class

    @property
    def state(self) -> Phase:
        """Where the call is: queued, awaiting_permission, admitted, running, or how it ended."""
        return self._call.phase

    @property
    def phase(self) -> Phase:
        """Deprecated alias of :attr:`state`, its name until 0.1; kept through 0.2."""
        warnings.warn(
            "CallHandle.phase is deprecated: use CallHandle.state", DeprecationWarning, stacklevel=2
        )
        return self.state

    @property
    def outcome(self) -> Outcome | None:
        """How it ended, once resolved."""
        res = self._call.result
        return res.result().outcome if res.done() else None

    @property
    def awaiting_permission(self) -> bool:
        """True while its permission prompt is open (it can still be answered)."""
        return self._call.phase is Phase.AWAITING_PERMISSION

    @property
    def pid(self) -> int | None:
        """The first process of a process call, once the host started it."""
        return self._call.pid

    @property
    def containment(self) -> str | None:
        """``cgroup`` or ``process_group``: how its processes are kept together."""
        return self._call.containment

    async def result(self) -> ToolResult:
        """The :class:`~turnwatch.runtime.model.ToolResult`, once the call is resolved."""
        res = self._call.result
        if not res.done():
            # As asyncio.shield: the caller's cancel ends its wait, never the call's result;
            # a bare waiter, set by the call as it resolves, costs less than shield's outer
            # future and its two callbacks, and a loop iteration less than a done callback.
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._call.wait_result(waiter)
            await waiter
        return res.result()
