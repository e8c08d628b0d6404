"""``serve-metrics``: counters and histograms rebuilt from a ledger, then following it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry

from turnwatch.exporters import http
from turnwatch.exporters.metrics import LiveCollector, StopMetrics
from turnwatch.tracing.follower import LedgerFollower
from turnwatch.watchdog.gauges import live_state


def build(path: Path, registry: CollectorRegistry) -> tuple[LedgerFollower, StopMetrics]:
    """Metrics on ``registry`` fed from the ledger at ``path``, gauges computed at scrape."""
    metrics = StopMetrics(registry)
    registry.register(LiveCollector(lambda: live_state(path)))
    return LedgerFollower(path, metrics.observe), metrics


def serve_ledger_metrics(
    path: Path,
    addr: str,
    *,
    poll_s: float = 1.0,
    say: Callable[[str], None] = print,
    stop: threading.Event | None = None,
) -> None:
    """Serve until ``stop`` is set (or forever)."""
    registry = CollectorRegistry()
    follower, _metrics = build(path, registry)
    replayed = follower.poll()
    server, port = http.serve(registry, addr)
    say(f"serving {http.url(addr, port)} ({replayed} events replayed from {path})")
    stop = stop or threading.Event()
    try:
        while not stop.wait(poll_s):
            follower.poll()
    finally:
        http.stop(server)
