"""Composition for the entry points: ledger + spans + metrics + the live gauges' source.

Only here (and in the demo) is the OpenTelemetry SDK wired; the library uses the API.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from turnwatch.exporters.metrics import LiveCollector, StopMetrics
from turnwatch.exporters.otel import tracer_provider
from turnwatch.tracing.ledger import Ledger
from turnwatch.tracing.pipeline import Telemetry
from turnwatch.tracing.spans import SpanBuilder
from turnwatch.watchdog.gauges import live_state


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


def wire(
    path: Path,
    *,
    dedup: bool = False,
    wait: bool = False,
    registry: CollectorRegistry | None = None,
) -> Wiring:
    """Open the ledger and build the pipeline (spans → metrics → ledger) and the gauges;
    ``dedup`` and ``wait`` as :class:`~turnwatch.tracing.pipeline.Telemetry` takes them.

    The exporters come first: one the environment asks for but cannot be had raises
    :class:`~turnwatch.exporters.otel.ExporterConfigError` before the ledger is opened.
    """
    provider = tracer_provider()
    ledger = Ledger(path)
    registry = registry or CollectorRegistry()
    metrics = StopMetrics(registry)
    registry.register(LiveCollector(lambda: live_state(path, ledger)))
    spans = SpanBuilder(provider.get_tracer("turnwatch"))
    telemetry = Telemetry(ledger=ledger, spans=spans, observers=[metrics], dedup=dedup, wait=wait)
    return Wiring(ledger, registry, metrics, telemetry, spans, provider)
