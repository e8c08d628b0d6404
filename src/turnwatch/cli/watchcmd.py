"""``turnwatch watch`` and ``turnwatch recover``: the watchdog as a program."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry

from turnwatch.cli.follow import build
from turnwatch.exporters import http
from turnwatch.exporters.otel import tracer_provider
from turnwatch.tracing.ledger import Ledger
from turnwatch.tracing.pipeline import Telemetry
from turnwatch.tracing.spans import SpanBuilder
from turnwatch.watchdog.loop import Cycle, Watchdog
from turnwatch.watchdog.report import ChangeLog
from turnwatch.watchdog.scan import Config


def make_watchdog(
    path: Path,
    cfg: Config,
    *,
    recover: bool,
    dry_run: bool,
    say: Callable[[str], None],
    observe_scan: Callable[[float], None] | None = None,
) -> tuple[Watchdog, Callable[[], None]]:
    """A watchdog recording its findings and actions (and their spans) into the ledger at
    ``path``, and what closes both (the ledger first: its writer builds the spans)."""
    provider = tracer_provider()  # first: an exporter that cannot be had opens nothing
    ledger = Ledger(path)
    telemetry = Telemetry(
        ledger=ledger, spans=SpanBuilder(provider.get_tracer("turnwatch.watchdog"))
    )

    def close() -> None:
        ledger.close()
        provider.shutdown()

    return Watchdog(
        path,
        telemetry,
        ledger.flush,
        cfg=cfg,
        recover=recover,
        dry_run=dry_run,
        observe_scan=observe_scan,
        say=say,
    ), close


def once(
    path: Path, cfg: Config, *, recover: bool, dry_run: bool, say: Callable[[str], None]
) -> Cycle:
    dog, close = make_watchdog(path, cfg, recover=recover, dry_run=dry_run, say=say)
    try:
        return asyncio.run(dog.cycle())
    finally:
        close()


def loop(
    path: Path,
    cfg: Config,
    *,
    interval_s: float,
    recover: bool,
    dry_run: bool,
    metrics_addr: str | None,
    say: Callable[[str], None],
) -> None:
    """Run until SIGINT/SIGTERM, serving the metrics (rebuilt from the ledger) if asked."""
    registry = CollectorRegistry()
    follower, metrics = build(path, registry)
    server = None
    if metrics_addr:  # first: a bad or busy address fails before anything is opened for writing
        follower.poll()
        server, port = http.serve(registry, metrics_addr)
        say(f"metrics on {http.url(metrics_addr, port)}")
    try:
        dog, close = make_watchdog(
            path, cfg, recover=recover, dry_run=dry_run, say=say, observe_scan=metrics.scan.observe
        )
    except BaseException:
        if server is not None:
            http.stop(server)
        raise

    log = ChangeLog()

    def after(cycle: Cycle) -> None:
        follower.poll()
        for line in log.lines(cycle):
            say(line)

    async def main() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await dog.run(interval_s, stop, after)

    try:
        asyncio.run(main())
    finally:
        if server is not None:
            http.stop(server)
        close()
