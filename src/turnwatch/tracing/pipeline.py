"""The event sink a runtime (or ``ingest``) is given: spans, then observers, then the ledger."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from turnwatch.runtime.events import Event, EventSink
from turnwatch.tracing.ledger import Ledger

log = logging.getLogger("turnwatch.telemetry")


class Telemetry:
    """Stamps each event with its span ids, feeds the observers (metrics), records it.

    A failing span builder or observer is logged and skipped: the ledger still gets the event
    (invariant 6: nothing recorded is lost).
    """

    def __init__(
        self,
        *,
        ledger: Ledger | None = None,
        spans: Callable[[Event], Event] | None = None,
        observers: Sequence[EventSink] = (),
        dedup: bool = False,
    ) -> None:
        self.ledger = ledger
        self.spans = spans
        self.observers = list(observers)
        self.dedup = dedup
        self.stage_errors = 0

    def __call__(self, event: Event) -> None:
        if self.spans is not None:
            try:
                event = self.spans(event)
            except Exception:
                self.stage_errors += 1
                log.exception("span builder failed on %s; the event is still recorded", event.kind)
        for observe in self.observers:
            try:
                observe(event)
            except Exception:
                self.stage_errors += 1
                log.exception("observer failed on %s; the event is still recorded", event.kind)
        if self.ledger is not None:
            self.ledger.append(event, dedup=self.dedup)
