"""Helpers for testing code that embeds turnwatch: an event capture, an invariant checker and a
clock that moves only when told.

The checker reads the event stream (in-memory, or a ledger's) and reports every breach of the
design's invariants 1, 2 and 4 that the stream shows. Our own tests, the benchmark's violation
counts and users' tests all use it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from turnwatch.runtime.clock import Clock
from turnwatch.runtime.events import Event, MemorySink
from turnwatch.runtime.fold import CallState, Fold, Move, Step
from turnwatch.runtime.model import Policy

__all__ = [
    "InvariantChecker",
    "ManualClock",
    "Violation",
    "capture_events",
    "check_invariants",
]


def capture_events() -> MemorySink:
    """A sink that keeps every event; pass it as ``Runtime(sink=...)``."""
    return MemorySink()


@dataclass(frozen=True, slots=True)
class Violation:
    """One breach: which invariant, where, and what the stream showed."""

    invariant: int
    session: str
    turn: str | None
    call: str | None
    detail: str


@dataclass
class InvariantChecker:
    """Feed events in order (it is a sink too); ``violations`` lists what broke.

    It reads the stream through the same :class:`~turnwatch.runtime.fold.Fold` as spans,
    metrics and the ledger, so "settled", "started" and "released" mean what they mean there.
    """

    violations: list[Violation] = field(default_factory=list)
    fold: Fold = field(default_factory=Fold)

    def __call__(self, event: Event) -> None:
        self.feed(event)

    def feed(self, ev: Event) -> None:
        """Check one event against what came before it."""
        before = self.fold.calls.get((ev.session, ev.call)) if ev.call is not None else None
        was_running = before is not None and before.running
        was_released = before is not None and before.released
        was_aborted = before is not None and before.abort_ts is not None
        st = self.fold(ev)
        c = st.call
        for move in st.moves:
            if move is Move.SETTLED:
                self._on_settled(st)
            elif c is None:
                continue
            elif move is Move.CROSSED:
                self._flag(
                    4, ev, f"{ev.kind} names {ev.tool}/{ev.turn}, the call is {c.tool}/{c.turn}"
                )
            elif move is Move.GRANTED and self.fold.turn_over(c):
                self._flag(1, ev, "a permission was granted after its turn settled")
            elif move is Move.STARTED and was_aborted:
                # Any start after the call's tools.abort (a command it spawned, above all): the
                # stop came first, and the call must start nothing after it.
                self._flag(2, ev, "a call started something after its tools.abort was sent")
            elif move is Move.STARTED and was_released:
                self._flag(2, ev, "a call stopped before it started has started")
            elif move is Move.STARTED and self.fold.turn_over(c):
                self._flag(2, ev, "a call started after its turn settled")
            elif move in _ENDS and was_running and _awaited(c) and self.fold.turn_over(c):
                self._flag(1, ev, f"a {c.tool_class} call ended after its turn settled")

    def _on_settled(self, st: Step) -> None:
        for (session, call), c in self.fold.calls.items():
            if session != st.ev.session or c.turn != st.ev.turn:
                continue
            if c.prompt_open:
                self._flag(
                    1,
                    st.ev,
                    f"turn settled while call {call}'s permission can be approved",
                    call=call,
                )
            if c.running and _awaited(c):
                self._flag(
                    1, st.ev, f"turn settled while {c.tool_class} call {call} runs", call=call
                )

    def _flag(self, invariant: int, ev: Event, detail: str, *, call: str | None = None) -> None:
        self.violations.append(Violation(invariant, ev.session, ev.turn, call or ev.call, detail))


_ENDS = frozenset({Move.RELEASED, Move.LATE})


def _awaited(c: CallState) -> bool:
    """Mutating and extension calls: the stop waits for the host's own answer."""
    return c.policy == Policy.AWAIT.value


def check_invariants(events: Iterable[Event]) -> list[Violation]:
    """Every violation the ordered ``events`` show."""
    checker = InvariantChecker()
    for ev in events:
        checker.feed(ev)
    return checker.violations


class ManualClock(Clock):
    """A clock that moves only when told: give it to the runtime and to the host.

    ``await clock.until_waiting(n)`` returns once ``n`` deadlines wait on it (the runtime's grace
    window, the host's SIGKILL deadline); ``clock.advance(s)`` then moves time and fires every
    deadline it passes. Processes, pipes and the kernel still run in real time.
    """

    def __init__(self) -> None:
        self.now = 0.0
        self._timers: list[tuple[float, asyncio.Future[None]]] = []
        self._changed: asyncio.Event | None = None

    def monotonic(self) -> float:
        return self.now

    @property
    def waiting(self) -> int:
        """Deadlines not yet reached that something waits on."""
        return sum(1 for _d, fut in self._timers if not fut.done())

    async def until_waiting(self, n: int) -> None:
        """Until at least ``n`` deadlines wait on this clock."""
        while self.waiting < n:
            await self._event().wait()
            self._event().clear()

    def advance(self, seconds: float) -> None:
        """Move time on by ``seconds``; every deadline now passed fires."""
        self.now += seconds
        left = []
        for deadline, fut in self._timers:
            if fut.done():
                continue
            if deadline <= self.now:
                fut.set_result(None)
            else:
                left.append((deadline, fut))
        self._timers = left

    async def wait(self, fut: asyncio.Future[Any], timeout: float) -> bool:
        timer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._timers.append((self.now + max(timeout, 0.0), timer))
        self._event().set()
        try:
            await asyncio.wait((fut, timer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
        return fut.done()

    async def limit(self, op: Callable[[float], Awaitable[bool]], timeout: float) -> bool:
        # The operation bounds itself in real seconds: give it (almost) none of its own, and
        # end it when this clock's deadline passes.
        task = asyncio.ensure_future(op(_FOREVER_S))
        if await self.wait(task, timeout):
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed


#: "No limit of its own" for an operation a ManualClock bounds: a day.
_FOREVER_S = 86_400.0
