"""Events the runtime emits, and the sinks that take them.

An event is one row of the ledger (design §3). The runtime hands each event to one sink, a plain
callable; with no sink nothing is built at all, so an unobserved runtime pays nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from turnwatch import names

if TYPE_CHECKING:
    import asyncio  # at run time only in wait_for: the triage commands never import asyncio

    from turnwatch.runtime.model import PastCalls

#: An event's attributes when it has none: shared, read-only.
NO_ATTRS: Mapping[str, Any] = MappingProxyType({})
#: ``Event``'s own constructor, all ten fields positional: a named tuple's ``__new__`` is a
#: Python function, and the busiest emitter (a call's) builds several events per call.
new_event = tuple.__new__


class Event(NamedTuple):
    """One thing that happened, with both clocks: wall (for people) and monotonic (for offsets).

    Immutable. A named tuple rather than a frozen dataclass: every tool call builds several,
    on the event loop, and a named tuple is built four times faster. Copy with ``_replace``.
    """

    kind: str
    session: str
    ts_unix: float
    mono_ns: int | None = None
    turn: str | None = None
    call: str | None = None
    tool: str | None = None
    #: Shared and read-only when not given (a named tuple's defaults are shared).
    attrs: Mapping[str, Any] = NO_ATTRS
    trace_id: str | None = None
    span_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON-line form of design §3 (what ``turnwatch ingest`` reads)."""
        out: dict[str, Any] = {"ts": self.ts_unix, "kind": self.kind, "session": self.session}
        for key in ("turn", "call", "tool", "mono_ns", "trace_id", "span_id"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.attrs:
            out["attrs"] = dict(self.attrs)
        return out


EventSink = Callable[[Event], None]


def storable_text(value: str) -> str:
    """``value`` as UTF-8 can carry it (SQLite, OTLP, a JSON line): a lone surrogate (a path
    decoded with ``surrogateescape``, a name the standard library parsed from ``"\\udcff"``)
    written as Python escapes it, as the ledger keeps it. Names that differ stay different."""
    if value.isascii():
        return value
    try:
        value.encode()
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode()
    return value


def now_event(
    kind: str,
    session: str,
    *,
    turn: str | None = None,
    call: str | None = None,
    tool: str | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> Event:
    """An event stamped now, on both clocks."""
    if kind not in _KINDS:
        raise ValueError(f"unknown event kind {kind!r}")
    # Positional: every event of an observed runtime is built here, on the event loop.
    return Event(
        kind, session, time.time(), time.monotonic_ns(), turn, call, tool, attrs or NO_ATTRS
    )


def wall_event(
    kind: str,
    session: str,
    *,
    turn: str | None = None,
    call: str | None = None,
    tool: str | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> Event:
    """An event stamped now on the wall clock alone, for a writer whose monotonic clock need
    not be the one the session was recorded on (the watchdog, recording about a runtime that
    ran on the boot before this one, or a foreign runtime whose ``mono_ns`` counts from its own
    start): a duration between its event and the runtime's is then measured on the clock both
    share, not on two that do not compare."""
    ev = now_event(kind, session, turn=turn, call=call, tool=tool, attrs=attrs)
    return ev._replace(mono_ns=None)


_KINDS = names.EVENT_KINDS


class MemorySink:
    """Keeps every event in a list: for tests, the demo, and embedding code that wants to look."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._waiters: list[tuple[str, Mapping[str, Any], asyncio.Future[Event]]] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        if self._waiters:
            self._wake(event)

    def _wake(self, event: Event) -> None:
        left = []
        for kind, match, fut in self._waiters:
            if fut.done():
                continue
            if event.kind == kind and all(getattr(event, k) == v for k, v in match.items()):
                fut.set_result(event)
            else:
                left.append((kind, match, fut))
        self._waiters = left

    async def wait_for(self, kind: str, **match: Any) -> Event:
        """The first event of ``kind`` whose fields equal ``match``: one already seen, or the
        next to arrive (from the loop's thread). An await, not a poll."""
        import asyncio

        seen = self.of(kind, **match)
        if seen:
            return seen[0]
        fut: asyncio.Future[Event] = asyncio.get_running_loop().create_future()
        self._waiters.append((kind, match, fut))
        return await fut

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    def kinds(self, *, session: str | None = None, call: str | None = None) -> list[str]:
        """The kinds seen, in order, optionally for one session or call."""
        return [
            e.kind
            for e in self.events
            if (session is None or e.session == session) and (call is None or e.call == call)
        ]

    def of(self, kind: str, **match: Any) -> list[Event]:
        """Events of ``kind`` whose fields equal ``match``."""
        return [
            e
            for e in self.events
            if e.kind == kind and all(getattr(e, k) == v for k, v in match.items())
        ]


class FanOut:
    """Hands each event to several sinks in order; one failing sink does not starve the rest."""

    def __init__(self, *sinks: EventSink) -> None:
        self.sinks = list(sinks)

    def past_calls(self) -> PastCalls | None:
        """What the first of its sinks that records (a ledger) remembers of past calls."""
        for sink in self.sinks:
            past = past_calls_of(sink)
            if past is not None:
                return past
        return None

    def __call__(self, event: Event) -> None:
        errors: list[Exception] = []
        for sink in self.sinks:
            try:
                sink(event)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise ExceptionGroup("event sinks failed", errors)


def past_calls_of(sink: object) -> PastCalls | None:
    """What ``sink`` remembers of the calls runtimes before this one made: a sink that records
    them (a ledger, or a fan-out or pipeline holding one) says so with a ``past_calls()``."""
    method = getattr(sink, "past_calls", None)
    past = method() if callable(method) else None
    return cast("PastCalls | None", past)
