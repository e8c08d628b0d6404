"""Tracing every stop: the SQLite ledger, OpenTelemetry spans, JSON-line ingest, the view."""

from __future__ import annotations

from typing import TYPE_CHECKING

from turnwatch._lazy import exports

if TYPE_CHECKING:
    from turnwatch.tracing.eventlines import EventLines as EventLines
    from turnwatch.tracing.ingest import BadLine as BadLine
    from turnwatch.tracing.ingest import IngestReport as IngestReport
    from turnwatch.tracing.ingest import ingest as ingest
    from turnwatch.tracing.ingest import parse_line as parse_line
    from turnwatch.tracing.ledger import Ledger as Ledger
    from turnwatch.tracing.ledger import LedgerError as LedgerError
    from turnwatch.tracing.ledger import connect as connect
    from turnwatch.tracing.ledger import read_events as read_events
    from turnwatch.tracing.paths import default_path as default_path
    from turnwatch.tracing.pipeline import Telemetry as Telemetry
    from turnwatch.tracing.spans import SpanBuilder as SpanBuilder
    from turnwatch.tracing.view import CallView as CallView
    from turnwatch.tracing.view import SessionView as SessionView
    from turnwatch.tracing.view import Thresholds as Thresholds
    from turnwatch.tracing.view import sessions as sessions
    from turnwatch.tracing.view import timeline as timeline

__getattr__, __dir__ = exports(__name__)
