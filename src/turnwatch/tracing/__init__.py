"""Tracing every stop: the SQLite ledger, OpenTelemetry spans, JSON-line ingest, the view."""

from turnwatch.tracing.ingest import BadLine, IngestReport, ingest, parse_line
from turnwatch.tracing.ledger import Ledger, LedgerError, connect, default_path, read_events
from turnwatch.tracing.pipeline import Telemetry
from turnwatch.tracing.spans import SpanBuilder
from turnwatch.tracing.view import CallView, SessionView, Thresholds, sessions, timeline

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
