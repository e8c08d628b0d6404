"""Sessions and turns: one live turn per session; a turn's calls share its stop."""

from __future__ import annotations

import asyncio
import difflib
import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from turnwatch.runtime.gate import Admission
from turnwatch.runtime.model import Phase, ToolResult, TurnOutcome

if TYPE_CHECKING:
    from turnwatch.runtime.calls import Call
    from turnwatch.runtime.runtime import Runtime


def closest(name: str, known: list[str]) -> str:
    """``known`` as a comma list, the closest to ``name`` first (for error messages)."""
    near = difflib.get_close_matches(name, known, n=len(known), cutoff=0.0)
    return ", ".join(near) or "(none)"


class Turn:
    """A turn: at most one is live per session. Its calls share its stop."""

    def __init__(self, session: Session, turn_id: str) -> None:
        self.session = session
        self.id = turn_id
        self.calls: dict[str, Call] = {}
        # Calls not yet resolved; the turn can settle only at zero.
        self._open = 0
        loop = asyncio.get_running_loop()
        self._idle = asyncio.Event()
        self._idle.set()
        # The turn's outcome, set once at settlement.
        self.settled: asyncio.Future[TurnOutcome] = loop.create_future()
        # The first stop's task (later stops join it).
        self.stop_task: asyncio.Task[None] | None = None
        # When the first stop reached the turn (monotonic seconds), for "pinned" judgements.
        self.stop_started: float | None = None
        # True once an ADR walk ran (a watchdog stop walks even a legacy turn once).
        self.walked = False
        # The walk's task that ends what the turn's finished calls left running.
        self.lingering: asyncio.Task[None] | None = None
        self.traceparent: str | None = None
        self._seq = itertools.count(1)

    @property
    def stopping(self) -> bool:
        """True once a stop reached the turn."""
        return self.stop_task is not None

    def next_call_id(self) -> str:
        """A call id never used in this session: the turn id is never reused."""
        return f"{self.id}.c{next(self._seq)}"

    def call_opened(self) -> None:
        self._open += 1
        self._idle.clear()

    def call_done(self, call: Call) -> None:
        self._open -= 1
        if self._open == 0:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Until every call of the turn is resolved."""
        await self._idle.wait()

    def request(
        self,
        tool: str,
        args: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
        tool_class: str | None = None,
    ) -> CallHandle:
        """Ask for a tool call; returns at once with a handle whose ``result()`` you await."""
        return self.session.runtime._request(self, tool, dict(args or {}), call_id, tool_class)

    async def finish(self) -> TurnOutcome:
        """The agent loop is done: settle the turn (or join the stop that is settling it)."""
        if self.stop_task is not None or self.settled.done():
            return await asyncio.shield(self.settled)
        await self.wait_idle()
        if not self.settled.done() and self.stop_task is None:
            self.session.runtime._settle(self, TurnOutcome.COMPLETED)
        return await asyncio.shield(self.settled)


class CallHandle:
    """What ``Turn.request`` returns: the call id at once, the result when it is resolved."""

    __slots__ = ("_call",)

    def __init__(self, call: Call) -> None:
        self._call = call

    @property
    def call_id(self) -> str:
        return self._call.call_id

    @property
    def tool(self) -> str:
        return self._call.tool

    @property
    def phase(self) -> Phase:
        return self._call.phase

    async def result(self) -> ToolResult:
        """The :class:`~turnwatch.runtime.model.ToolResult`, once the call is resolved."""
        return await asyncio.shield(self._call.result)


class Session:
    """A conversation: one live turn at a time; ``processing`` is the UI's spinner."""

    def __init__(self, runtime: Runtime, session_id: str, max_running: int) -> None:
        self.runtime = runtime
        self.id = session_id
        self.admission = Admission(max_running)
        self.turns: dict[str, Turn] = {}
        self.live: Turn | None = None
        # True from turn start until processing.cleared.
        self.processing = False
        self.used_call_ids: set[str] = set()
        self._turn_seq = itertools.count(1)
