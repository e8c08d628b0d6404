"""Exporters: Prometheus metrics and their endpoint, OpenTelemetry SDK wiring."""

from __future__ import annotations

from typing import TYPE_CHECKING

from turnwatch._lazy import exports

if TYPE_CHECKING:
    from turnwatch.exporters.metrics import LiveCollector, LiveState, StopMetrics, tool_label

_WHERE = {
    "LiveCollector": "turnwatch.exporters.metrics",
    "LiveState": "turnwatch.exporters.metrics",
    "StopMetrics": "turnwatch.exporters.metrics",
    "tool_label": "turnwatch.exporters.metrics",
}

__all__ = ["LiveCollector", "LiveState", "StopMetrics", "tool_label"]


__getattr__, __dir__ = exports(__name__, _WHERE)
