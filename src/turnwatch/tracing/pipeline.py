"""The event sink a runtime (or ``ingest``) is given: spans, then observers, then the ledger."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from turnwatch.runtime.events import Event, EventSink
from turnwatch.tracing.ledger import Ledger

log = logging.getLogger("turnwatch.telemetry")


class Telemetry:
    """Stamps each event with its span ids, feeds the observers (metrics), records it.

    With a ledger, every stage runs in the ledger's writer thread and the caller only enqueues:
    the stop path never waits on spans, metrics or disk. Without one, the stages run inline.
    A failing stage is logged and skipped; the event is still recorded (invariant 6).
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
        if ledger is not None:
            ledger.transform = spans
            ledger.observers = list(observers)

    def __call__(self, event: Event) -> None:
        if self.ledger is not None:
            self.ledger.append(event, dedup=self.dedup)
            return
        if self.spans is not None:
            try:
                event = self.spans(event)
            except Exception:
                self.stage_errors += 1
                log.exception("span builder failed on %s", event.kind)
        for observe in self.observers:
            try:
                observe(event)
            except Exception:
                self.stage_errors += 1
                log.exception("observer failed on %s", event.kind)
