"""Composition for the entry points: ledger + spans + metrics + the live gauges' source.

Only here (and in the demo) is the OpenTelemetry SDK wired; the library uses the API.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry

from turnwatch import names
from turnwatch.exporters.metrics import LiveCollector, LiveState, StopMetrics
from turnwatch.exporters.otel import tracer_provider
from turnwatch.tracing import view
from turnwatch.tracing.ledger import Ledger, connect
from turnwatch.tracing.pipeline import Telemetry
from turnwatch.tracing.spans import SpanBuilder
from turnwatch.watchdog.procs import ProcessTable


def live_state(path: Path, ledger: Ledger | None = None) -> LiveState:
    """The gauges now, from the ledger's view joined with the process table."""
    try:
        conn = connect(path, readonly=True)
    except Exception:
        return LiveState({}, 0, 0, ledger.lost if ledger else 0)
    try:
        now = time.time()
        rows = view.sessions(conn, now=now)
        inflight: Counter[str] = Counter()
        aborted_live = 0
        table = ProcessTable.scan({c.pid for s in rows for c in s.calls if c.pid})
        for s in rows:
            for c in s.calls:
                if c.open and c.started_ts is not None and c.policy:
                    inflight[c.policy] += 1
            if s.settled_ts is not None and any(table.alive(c.pid, c.create_time) for c in s.calls):
                aborted_live += 1
        pinned = sum(1 for s in rows if s.state == names.STATE_PINNED)
        return LiveState(dict(inflight), pinned, aborted_live, ledger.lost if ledger else 0)
    finally:
        conn.close()


@dataclass
class Wiring:
    """Everything an entry point needs to record and expose stops."""

    ledger: Ledger
    registry: CollectorRegistry
    metrics: StopMetrics
    telemetry: Telemetry
    spans: SpanBuilder
    closers: list[object] = field(default_factory=list)

    def close(self) -> None:
        self.ledger.close()


def wire(path: Path, *, dedup: bool = False, registry: CollectorRegistry | None = None) -> Wiring:
    """Open the ledger and build the pipeline (spans → metrics → ledger) and the gauges."""
    ledger = Ledger(path)
    registry = registry or CollectorRegistry()
    metrics = StopMetrics(registry)
    registry.register(LiveCollector(lambda: live_state(path, ledger)))
    spans = SpanBuilder(tracer_provider().get_tracer("turnwatch"))
    telemetry = Telemetry(ledger=ledger, spans=spans, observers=[metrics], dedup=dedup)
    return Wiring(ledger, registry, metrics, telemetry, spans)
