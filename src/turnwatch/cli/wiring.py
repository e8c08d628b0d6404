"""Composition for the entry points: ledger + spans + metrics + the live gauges' source.

Only here (and in the demo) is the OpenTelemetry SDK wired; the library uses the API.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
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
    provider: TracerProvider

    def close(self) -> None:
        """Flush the ledger (and with it the span builder), then the span exporter."""
        self.ledger.close()
        self.provider.shutdown()


def wire(path: Path, *, dedup: bool = False, registry: CollectorRegistry | None = None) -> Wiring:
    """Open the ledger and build the pipeline (spans → metrics → ledger) and the gauges."""
    ledger = Ledger(path)
    registry = registry or CollectorRegistry()
    metrics = StopMetrics(registry)
    registry.register(LiveCollector(lambda: live_state(path, ledger)))
    provider = tracer_provider()
    spans = SpanBuilder(provider.get_tracer("turnwatch"))
    telemetry = Telemetry(ledger=ledger, spans=spans, observers=[metrics], dedup=dedup)
    return Wiring(ledger, registry, metrics, telemetry, spans, provider)
