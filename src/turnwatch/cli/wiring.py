"""Composition for the entry points: ledger + spans + metrics + the live gauges' source.

Only here (and in the demo) is the OpenTelemetry SDK wired; the library uses the API.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from turnwatch import names
from turnwatch.exporters.metrics import LiveCollector, LiveState, StopMetrics
from turnwatch.exporters.otel import tracer_provider
from turnwatch.tracing.ledger import Ledger, LedgerError, connect
from turnwatch.tracing.pipeline import Telemetry
from turnwatch.tracing.spans import SpanBuilder
from turnwatch.watchdog.scan import scan


def live_state(path: Path, ledger: Ledger | None = None) -> LiveState:
    """The gauges now: the watchdog's own findings, so a gauge and a finding never disagree."""
    lost = ledger.lost if ledger else 0
    try:
        conn = connect(path, readonly=True)
    except LedgerError:
        return LiveState({}, 0, 0, lost)  # no ledger yet: a scrape must still succeed
    try:
        findings = scan(conn).findings
        inflight = dict(
            conn.execute(
                "SELECT c.policy, count(*) FROM sessions s JOIN calls c "
                "ON c.session = s.session AND c.turn = s.turn WHERE s.processing = 1 "
                "AND c.started_ts IS NOT NULL AND c.ended_ts IS NULL GROUP BY c.policy"
            ).fetchall()
        )
    finally:
        conn.close()
    pinned = {f.session for f in findings if f.kind == names.F_PINNED_SESSION}
    aborted_live = {
        (f.session, f.turn) for f in findings if f.kind == names.F_ABORTED_WITH_LIVE_PROCESS
    }
    return LiveState(inflight, len(pinned), len(aborted_live), lost)


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
