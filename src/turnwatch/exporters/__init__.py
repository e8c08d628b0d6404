"""Exporters: Prometheus metrics and their endpoint, OpenTelemetry SDK wiring."""

from __future__ import annotations

from typing import TYPE_CHECKING

from turnwatch._lazy import exports

if TYPE_CHECKING:
    from turnwatch.exporters.metrics import LiveCollector as LiveCollector
    from turnwatch.exporters.metrics import LiveState as LiveState
    from turnwatch.exporters.metrics import StopMetrics as StopMetrics
    from turnwatch.exporters.metrics import tool_label as tool_label

__getattr__, __dir__ = exports(__name__)
