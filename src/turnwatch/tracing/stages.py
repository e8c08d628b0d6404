"""What reads an event before it is recorded: the span builder, then the observers (metrics).

Every reader takes the fold's :class:`~turnwatch.runtime.fold.Step`, never the raw event: with a
ledger, the step is the one the writer's own fold made for the summary rows (each event is folded
once); without one, :class:`Stages` folds it itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from turnwatch.runtime.events import Event
from turnwatch.runtime.fold import Fold, Step, StepReader, Store

log = logging.getLogger("turnwatch.telemetry")

#: What reads a step: ``on_step`` (a StepReader) or a plain sink of the (stamped) event.
Reader = StepReader | Callable[[Event], object]


class _EventOf:
    """A plain sink as a step reader: it gets the step's (stamped) event."""

    __slots__ = ("sink",)

    def __init__(self, sink: Callable[[Event], object]) -> None:
        self.sink = sink

    def on_step(self, st: Step) -> object:
        return self.sink(st.ev)


class Stages:
    """Runs ``spans`` (stamps each event with its span ids) then each observer on a step.

    A reader that fails is logged and counted; the event goes on regardless, so whatever records
    it afterwards still does (invariant 6: nothing recorded is lost).
    """

    def __init__(self, spans: StepReader | None = None, observers: Sequence[Reader] = ()) -> None:
        self.spans = spans
        # Judged once: a runtime-checkable isinstance costs microseconds, and this is per event.
        self.observers: list[StepReader] = [
            o if isinstance(o, StepReader) else _EventOf(o) for o in observers
        ]
        self.errors = 0
        # Used only where no ledger folds the events (see ``__call__``).
        self._fold: Fold | None = None

    def __bool__(self) -> bool:
        return self.spans is not None or bool(self.observers)

    def on_step(self, st: Step) -> Event:
        """Read one step: the span builder stamps its event, the observers see the stamped one;
        returns the event to record."""
        if self.spans is not None:
            try:
                st.ev = self.spans.on_step(st)  # type: ignore[assignment]
            except Exception:
                self.errors += 1
                log.exception("span builder failed on %s; the event is still recorded", st.ev.kind)
        for observe in self.observers:
            try:
                observe.on_step(st)
            except Exception:
                self.errors += 1
                log.exception("observer failed on %s; the event is still recorded", st.ev.kind)
        return st.ev

    def __call__(self, ev: Event) -> Event:
        """Fold ``ev`` here and read its step (telemetry with no ledger)."""
        if self._fold is None:
            self._fold = Fold(Store.for_reader())
        try:
            st = self._fold(ev)
        except Exception:  # a fold bug must not lose the event
            self.errors += 1
            log.exception("fold failed on %s; the event is still recorded", ev.kind)
            return ev
        return self.on_step(st)
