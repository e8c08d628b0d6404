"""``turnwatch demo``: the field reports reproduced on a ledger, and their metrics served."""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from rich.console import Console

from turnwatch.cli.scenario import DemoReport, run_demo
from turnwatch.cli.wiring import wire
from turnwatch.exporters import http


def run(
    *,
    grace_s: float,
    ledger: Path | None,
    quiet: bool,
    err: Console,
    then: Callable[[DemoReport, CollectorRegistry], None],
) -> None:
    """Run the demo on ``ledger`` (a temporary one if None), then ``then(report, registry)``
    while the ledger still exists: the registry's live gauges read it at every scrape."""
    with tempfile.TemporaryDirectory(prefix="turnwatch-demo-") as tmp:
        path = ledger or Path(tmp) / "ledger.sqlite3"
        wiring = wire(path)
        spinner: AbstractContextManager[Any] = (
            err.status("running the demo…") if not quiet else nullcontext()
        )
        try:
            with spinner:
                report = asyncio.run(
                    run_demo(
                        grace_s=grace_s,
                        workdir=Path(tmp),
                        sink=wiring.telemetry,
                        ledger=wiring.ledger,
                        say=lambda m: err.print(f"[dim]· {m}[/]"),
                    )
                )
        finally:
            wiring.close()
        report.ledger = str(path) if ledger else None
        then(report, wiring.registry)


def serve_until_interrupted(registry: CollectorRegistry, addr: str, err: Console) -> None:
    """Serve ``registry`` on ``addr`` until Ctrl-C. A bad address raises ValueError or OSError."""
    server, port = http.serve(registry, addr)
    err.print(f"metrics on http://{http.parse_addr(addr)[0]}:{port}/metrics (Ctrl-C to stop)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        http.stop(server)
