"""What happens to an event before it is recorded: the span builder, then the observers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from turnwatch.runtime.events import Event
from turnwatch.runtime.fold import MAX_RELEASED, Fold, Step, StepReader, Store

log = logging.getLogger("turnwatch.telemetry")


class Stages:
    """Runs ``transform`` (stamps span ids) then each observer (metrics) on an event.

    Stages that read steps (:class:`~turnwatch.runtime.fold.StepReader`: spans, metrics) share
    one fold: each event is read into the stop-path model once, not once per consumer.

    A stage that fails is logged and counted; the event goes on regardless, so whatever records
    it afterwards still does (invariant 6: nothing recorded is lost).
    """

    def __init__(
        self,
        transform: Callable[[Event], Event] | None = None,
        observers: Sequence[Callable[[Event], None]] = (),
    ) -> None:
        self.transform = transform
        self.observers = list(observers)
        self.errors = 0
        # Judged once: a runtime-checkable isinstance costs microseconds, and this is per event.
        self._transform_reads = isinstance(transform, StepReader)
        self._reads = [isinstance(o, StepReader) for o in self.observers]
        reads = self._transform_reads or any(self._reads)
        self.fold = Fold(Store(MAX_RELEASED)) if reads else None

    def __bool__(self) -> bool:
        return self.transform is not None or bool(self.observers)

    def __call__(self, ev: Event) -> Event:
        st = self._fold(ev)
        if self.transform is not None:
            try:
                if st is not None and self._transform_reads:
                    ev = self.transform.on_step(st)  # type: ignore[attr-defined]
                    st.ev = ev  # the observers see the stamped event (exemplars)
                else:
                    ev = self.transform(ev)
            except Exception:
                self.errors += 1
                log.exception("span builder failed on %s; the event is still recorded", ev.kind)
        for observe, reads in zip(self.observers, self._reads, strict=True):
            try:
                if st is not None and reads:
                    observe.on_step(st)  # type: ignore[attr-defined]
                else:
                    observe(ev)
            except Exception:
                self.errors += 1
                log.exception("observer failed on %s; the event is still recorded", ev.kind)
        return ev

    def _fold(self, ev: Event) -> Step | None:
        if self.fold is None:
            return None
        try:
            return self.fold(ev)
        except Exception:  # a fold bug must not lose the event: the stages fold it themselves
            self.errors += 1
            log.exception("fold failed on %s; the event is still recorded", ev.kind)
            return None
