"""The event sink a runtime (or ``ingest``) is given: spans, then observers, then the ledger.

The one way to wire them: :class:`Telemetry` attaches its readers to the ledger (whose writer
folds each event once and hands them the step); without a ledger it folds and reads inline.
"""

from __future__ import annotations

from collections.abc import Sequence

from turnwatch.runtime.events import Event
from turnwatch.runtime.fold import StepReader
from turnwatch.tracing.ledger import Ledger
from turnwatch.tracing.past_calls import LedgerCalls
from turnwatch.tracing.stages import Reader, Stages


class Telemetry:
    """Stamps each event with its span ids, feeds the observers (metrics), records it.

    ``dedup``: the events are a foreign source's (a line read twice is kept once). ``wait``: the
    producer may wait for the writer rather than have events dropped when it is far behind
    (``ingest``, the events API; never a runtime's event loop).

    With a ledger, the stages run in the ledger's writer thread and the caller only enqueues:
    the stop path never waits on spans, metrics or disk. Without one, they run inline.
    """

    def __init__(
        self,
        *,
        ledger: Ledger | None = None,
        spans: StepReader | None = None,
        observers: Sequence[Reader] = (),
        dedup: bool = False,
        wait: bool = False,
    ) -> None:
        self.ledger = ledger
        self.dedup = dedup
        # A producer that may wait for the writer (a file, a request), never the runtime's
        # loop: see Ledger.append.
        self.wait = wait
        self.stages = Stages(spans, observers)
        if ledger is not None:
            ledger.attach(self.stages)

    def past_calls(self) -> LedgerCalls | None:
        """What its ledger remembers of past calls (see :meth:`Ledger.past_calls`)."""
        return self.ledger.past_calls() if self.ledger is not None else None

    def __call__(self, event: Event) -> None:
        if self.ledger is not None:
            self.ledger.append(event, dedup=self.dedup, wait=self.wait)
        else:
            self.stages(event)

    def foreign(self, event: Event) -> None:
        """An event another program sent (a browser, over the events API): kept once however
        often it is sent (a page going away sends again what it could not see answered), and
        its sender waits for the writer rather than lose it."""
        if self.ledger is not None:
            self.ledger.append(event, dedup=True, wait=True)
        else:
            self.stages(event)
