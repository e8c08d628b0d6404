"""``serve-metrics``: counters and histograms rebuilt from a ledger, then following it; and,
with ``--events``, ``POST /v1/events`` recording into the same ledger."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

from turnwatch.exporters import http
from turnwatch.exporters.metrics import LiveCollector, StopMetrics
from turnwatch.exporters.otel import tracer_provider
from turnwatch.tracing.eventsapi import MAX_BYTES, PATH, EventsApp, recorder
from turnwatch.tracing.ledger import Ledger
from turnwatch.tracing.ledger_follower import LedgerFollower
from turnwatch.tracing.pipeline import Telemetry
from turnwatch.tracing.spans import SpanBuilder
from turnwatch.watchdog.gauges import live_state


def build(
    path: Path, registry: CollectorRegistry, say: Callable[[str], None] | None = None
) -> tuple[LedgerFollower, StopMetrics]:
    """Metrics on ``registry`` fed from the ledger at ``path``, gauges computed at scrape; with
    ``say``, a read that fails is said once per outage and tried again (a service's loop)."""
    metrics = StopMetrics(registry)
    registry.register(LiveCollector(lambda: live_state(path)))
    return LedgerFollower(path, metrics.observe, say), metrics


def serve_ledger_metrics(
    path: Path,
    addr: str,
    *,
    poll_s: float = 1.0,
    say: Callable[[str], None] = print,
    stop: threading.Event | None = None,
    events: EventsOptions | None = None,
    page: bool = False,
    grace_s: float = 10.0,
) -> Ledger | None:
    """Serve until ``stop`` is set or Ctrl-C (or forever); with ``events``, ``POST /v1/events``
    too, whose ledger this returns, closed (what it lost, the program says); with ``page``, the
    live page (its Stop through each session's control endpoint)."""
    registry = CollectorRegistry()
    follower, _metrics = build(path, registry, say)
    replayed = follower.poll()
    routes, close = _events_route(path, events) if events is not None else ({}, None)
    if page:
        from turnwatch.cli.live.actions import by_control, recover_by_watchdog
        from turnwatch.cli.live.page import LivePage, stop_by_control

        live = LivePage(
            path,
            stop_by_control(path),
            token=events.token if events else None,
            can_stop=by_control,
            recover=recover_by_watchdog(path, grace_s),
        )
        routes.update(live.routes())
    try:
        server, port = http.serve(registry, addr, routes=routes)
    except BaseException:
        if close is not None:
            close()
        raise
    say(f"serving {http.url(addr, port)} ({replayed} events replayed from {path})")
    base = http.url(addr, port).removesuffix("/metrics")
    if events is not None:
        say(f"accepting events at {base}{PATH}")
    if page:
        say(f"live page on {base}/")
    stop = stop or threading.Event()
    try:
        while not stop.wait(poll_s):
            follower.poll()
    except KeyboardInterrupt:  # Ctrl-C: the way a person stops it
        pass
    finally:
        http.stop(server)
        ledger = close() if close is not None else None
    return ledger


@dataclass(frozen=True)
class EventsOptions:
    """How ``POST /v1/events`` is guarded."""

    token: str | None = None
    origins: tuple[str, ...] = ()
    max_bytes: int = MAX_BYTES


def _events_route(
    path: Path, opts: EventsOptions
) -> tuple[dict[str, http.WSGIApp], Callable[[], Ledger]]:
    """The events endpoint over the ledger at ``path`` (spans built as for ``ingest``)."""
    provider = tracer_provider()
    ledger = Ledger(path)
    telemetry = Telemetry(  # a request waits for the writer rather than lose events
        ledger=ledger, spans=SpanBuilder(provider.get_tracer("turnwatch")), dedup=True, wait=True
    )

    def close() -> Ledger:
        ledger.close()
        provider.shutdown()
        return ledger

    app = EventsApp(
        recorder(telemetry, ledger),
        token=opts.token,
        origins=opts.origins,
        max_bytes=opts.max_bytes,
    )
    return {PATH: app}, close
