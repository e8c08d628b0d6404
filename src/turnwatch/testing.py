"""Helpers for testing code that embeds turnwatch: an event capture and an invariant checker.

The checker reads the event stream (in-memory, or a ledger's) and reports every breach of the
design's invariants 1, 2 and 4 that the stream shows. Our own tests, the benchmark's violation
counts and users' tests all use it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from turnwatch import names
from turnwatch.runtime.events import Event, MemorySink

__all__ = ["InvariantChecker", "Violation", "capture_events", "check_invariants"]

_AWAITED = frozenset({"mutating", "extension"})


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
class _CallSeen:
    tool: str | None
    turn: str | None
    tool_class: str | None = None
    started: bool = False
    finished: bool = False
    stopped_before_start: bool = False
    prompt_open: bool = False


@dataclass
class InvariantChecker:
    """Feed events in order (it is a sink too); ``violations`` lists what broke."""

    violations: list[Violation] = field(default_factory=list)
    _calls: dict[tuple[str, str], _CallSeen] = field(default_factory=dict)
    _settled: set[tuple[str, str]] = field(default_factory=set)

    def __call__(self, event: Event) -> None:
        self.feed(event)

    def feed(self, ev: Event) -> None:
        """Check one event against what came before it."""
        if ev.call is None:
            if ev.kind == names.TURN_SETTLED and ev.turn is not None:
                self._on_settled(ev)
            return
        key = (ev.session, ev.call)
        seen = self._calls.get(key)
        if seen is None:
            seen = self._calls[key] = _CallSeen(ev.tool, ev.turn)
        elif (ev.tool, ev.turn) != (seen.tool, seen.turn):
            self._flag(
                4, ev, f"{ev.kind} names {ev.tool}/{ev.turn}, the call is {seen.tool}/{seen.turn}"
            )
            return
        settled = (ev.session, ev.turn or "") in self._settled
        kind = ev.kind
        if kind == names.TOOL_REQUESTED:
            seen.tool_class = str(ev.attrs.get("class", "extension"))
        elif kind == names.PERMISSION_REQUESTED:
            seen.prompt_open = True
        elif kind in (names.PERMISSION_DENIED, names.PERMISSION_CANCELLED):
            seen.prompt_open = False
            seen.stopped_before_start |= kind == names.PERMISSION_CANCELLED
        elif kind == names.PERMISSION_GRANTED:
            seen.prompt_open = False
            if settled:
                self._flag(1, ev, "a permission was granted after its turn settled")
        elif kind == names.TOOL_REFUSED:
            seen.stopped_before_start = True
        elif kind == names.TOOL_STARTED:
            seen.started = True
            if seen.stopped_before_start:
                self._flag(2, ev, "a call stopped before it started has started")
            elif settled:
                self._flag(2, ev, "a call started after its turn settled")
        elif kind in (names.TOOL_FINISHED, names.TOOL_RESULT_DISCARDED):
            if kind == names.TOOL_FINISHED and ev.attrs.get("before_start"):
                seen.stopped_before_start = True
            if settled and seen.tool_class in _AWAITED and seen.started and not seen.finished:
                self._flag(1, ev, f"a {seen.tool_class} call ended after its turn settled")
            seen.finished = (
                seen.finished or kind == names.TOOL_FINISHED or (seen.tool_class not in _AWAITED)
            )

    def _on_settled(self, ev: Event) -> None:
        assert ev.turn is not None
        self._settled.add((ev.session, ev.turn))
        for (session, call), seen in self._calls.items():
            if session != ev.session or seen.turn != ev.turn:
                continue
            if seen.prompt_open:
                self._flag(
                    1, ev, f"turn settled while call {call}'s permission can be approved", call=call
                )
            if seen.started and not seen.finished and seen.tool_class in _AWAITED:
                self._flag(
                    1, ev, f"turn settled while {seen.tool_class} call {call} runs", call=call
                )

    def _flag(self, invariant: int, ev: Event, detail: str, *, call: str | None = None) -> None:
        self.violations.append(Violation(invariant, ev.session, ev.turn, call or ev.call, detail))


def check_invariants(events: Iterable[Event]) -> list[Violation]:
    """Every violation the ordered ``events`` show."""
    checker = InvariantChecker()
    for ev in events:
        checker.feed(ev)
    return checker.violations
