"""Tracing every stop: the SQLite ledger, OpenTelemetry spans, JSON-line ingest, the view."""

from __future__ import annotations

from typing import TYPE_CHECKING

from turnwatch._lazy import exports

if TYPE_CHECKING:
    from turnwatch.tracing.ingest import BadLine, IngestReport, ingest, parse_line
    from turnwatch.tracing.ledger import Ledger, LedgerError, connect, read_events
    from turnwatch.tracing.paths import default_path
    from turnwatch.tracing.pipeline import Telemetry
    from turnwatch.tracing.spans import SpanBuilder
    from turnwatch.tracing.view import CallView, SessionView, Thresholds, sessions, timeline

_WHERE = {
    "BadLine": "turnwatch.tracing.ingest",
    "IngestReport": "turnwatch.tracing.ingest",
    "ingest": "turnwatch.tracing.ingest",
    "parse_line": "turnwatch.tracing.ingest",
    "Ledger": "turnwatch.tracing.ledger",
    "LedgerError": "turnwatch.tracing.ledger",
    "connect": "turnwatch.tracing.ledger",
    "default_path": "turnwatch.tracing.paths",
    "read_events": "turnwatch.tracing.ledger",
    "Telemetry": "turnwatch.tracing.pipeline",
    "SpanBuilder": "turnwatch.tracing.spans",
    "CallView": "turnwatch.tracing.view",
    "SessionView": "turnwatch.tracing.view",
    "Thresholds": "turnwatch.tracing.view",
    "sessions": "turnwatch.tracing.view",
    "timeline": "turnwatch.tracing.view",
}

__all__ = [
    "BadLine",
    "CallView",
    "IngestReport",
    "Ledger",
    "LedgerError",
    "SessionView",
    "SpanBuilder",
    "Telemetry",
    "Thresholds",
    "connect",
    "default_path",
    "ingest",
    "parse_line",
    "read_events",
    "sessions",
    "timeline",
]


__getattr__, __dir__ = exports(__name__, _WHERE)
