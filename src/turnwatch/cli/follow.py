"""``serve-metrics``: counters and histograms rebuilt from a ledger, then following it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry

from turnwatch.cli.wiring import live_state
from turnwatch.exporters import http
from turnwatch.exporters.metrics import LiveCollector, StopMetrics
from turnwatch.tracing.ledger import connect, read_events


class LedgerFollower:
    """Feeds a ledger's events, from the first, to ``observe``; then polls for new ones."""

    def __init__(self, path: Path, observe: Callable[..., None]) -> None:
        self.path = path
        self.observe = observe
        self.seq = 0

    def poll(self) -> int:
        """Feed every event after the last one seen; returns how many."""
        conn = connect(self.path, readonly=True)
        try:
            n = 0
            for seq, ev in read_events(conn, after_seq=self.seq):
                self.observe(ev)
                self.seq = seq
                n += 1
            return n
        finally:
            conn.close()


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
    host = http.parse_addr(addr)[0]
    say(f"serving http://{host}:{port}/metrics ({replayed} events replayed from {path})")
    stop = stop or threading.Event()
    try:
        while not stop.wait(poll_s):
            follower.poll()
    finally:
        http.stop(server)
