"""Wiring the OpenTelemetry SDK, for entry points only (library code uses the API).

Configured by the standard variables: ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``, ``none``),
``OTEL_EXPORTER_OTLP_ENDPOINT`` and friends, ``OTEL_SERVICE_NAME``. With none of them set, spans
are built (their ids go into the ledger) but exported nowhere: a laptop has no collector.
"""

from __future__ import annotations

import os

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter


class ExporterMissingError(RuntimeError):
    """OTLP was asked for but the extra is not installed."""


def _exporter() -> SpanExporter | None:
    choice = os.environ.get("OTEL_TRACES_EXPORTER")
    if choice is None and (
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        choice = "otlp"
    if choice in (None, "", "none"):
        return None
    if choice == "console":
        return ConsoleSpanExporter()
    if choice == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ExporterMissingError(
                "OTEL_TRACES_EXPORTER=otlp needs the extra: pip install 'turnwatch[otlp]'"
            ) from None
        return OTLPSpanExporter()
    raise ValueError(f"OTEL_TRACES_EXPORTER={choice!r}: turnwatch knows otlp, console, none")


def tracer_provider(service: str = "turnwatch") -> TracerProvider:
    """A provider with the exporter the environment asks for (or none)."""
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service)})
    provider = TracerProvider(resource=resource)
    exporter = _exporter()
    if exporter is not None:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider
