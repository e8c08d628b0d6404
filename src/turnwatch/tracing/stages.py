"""What happens to an event before it is recorded: the span builder, then the observers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from turnwatch.runtime.events import Event

log = logging.getLogger("turnwatch.telemetry")


class Stages:
    """Runs ``transform`` (stamps span ids) then each observer (metrics) on an event.

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

    def __bool__(self) -> bool:
        return self.transform is not None or bool(self.observers)

    def __call__(self, ev: Event) -> Event:
        if self.transform is not None:
            try:
                ev = self.transform(ev)
            except Exception:
                self.errors += 1
                log.exception("span builder failed on %s; the event is still recorded", ev.kind)
        for observe in self.observers:
            try:
                observe(ev)
            except Exception:
                self.errors += 1
                log.exception("observer failed on %s; the event is still recorded", ev.kind)
        return ev
