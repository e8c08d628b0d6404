"""``turnwatch demo``: the field reports reproduced on a ledger, and their metrics served."""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from rich.console import Console

from turnwatch.cli.common import said_lost
from turnwatch.cli.demo.scenario import DemoReport, run_demo
from turnwatch.cli.wiring import wire
from turnwatch.exporters import http


def run(
    *,
    grace_s: float,
    ledger: Path | None,
    quiet: bool,
    err: Console,
    then: Callable[[DemoReport], None],
    serve_addr: str | None = None,
) -> None:
    """Run the demo on ``ledger`` (a temporary one if None), then ``then(report)``.

    With ``serve_addr``, the metrics are served from before the run (a bad or busy address
    fails at once, not after the demo) until Ctrl-C after it, while the ledger still exists:
    the live gauges read it at every scrape.
    """
    if serve_addr is not None:
        http.parse_addr(serve_addr)  # a bad address is refused before any file is made
    with tempfile.TemporaryDirectory(prefix="turnwatch-demo-") as tmp:
        path = ledger or Path(tmp) / "ledger.sqlite3"
        wiring = wire(path)
        server = None
        if serve_addr is not None:
            try:
                server, port = http.serve(wiring.registry, serve_addr)
            except ValueError:
                wiring.close()
                raise
            err.print(f"metrics on {http.url(serve_addr, port)}", highlight=False)
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
                        say=lambda m: err.print(f"[dim]· {m}[/]", soft_wrap=False),
                    )
                )
        except BaseException:
            if server is not None:
                http.stop(server)
            wiring.close()
            raise
        wiring.close()
        report.ledger = str(path) if ledger else None
        then(report)
        if server is not None:
            err.print("serving the demo's metrics until Ctrl-C", highlight=False)
            try:
                threading.Event().wait()
            except KeyboardInterrupt:
                pass
            finally:
                http.stop(server)
        said_lost(wiring.ledger)  # last: the report above may miss what the ledger lost


def run_web(*, grace_s: float, ledger: Path | None, addr: str, err: Console) -> None:
    """``demo --web``: the live page over the demo's sessions until Ctrl-C."""
    from turnwatch.cli.demo.web import serve_live

    http.parse_addr(addr)  # a bad address fails before the tree is built
    with tempfile.TemporaryDirectory(prefix="turnwatch-demo-") as tmp:
        path = ledger or Path(tmp) / "ledger.sqlite3"
        wiring = wire(path)
        try:
            asyncio.run(
                serve_live(
                    wiring,
                    path,
                    Path(tmp),
                    addr=addr,
                    grace_s=grace_s,
                    say=lambda m: err.print(m, highlight=False, soft_wrap=True),
                )
            )
        except KeyboardInterrupt:
            pass
        finally:
            wiring.close()
        said_lost(wiring.ledger)
