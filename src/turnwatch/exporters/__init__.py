"""Exporters: Prometheus metrics and their endpoint, OpenTelemetry SDK wiring."""

from turnwatch.exporters.metrics import LiveCollector, LiveState, StopMetrics, tool_label

__all__ = ["LiveCollector", "LiveState", "StopMetrics", "tool_label"]
