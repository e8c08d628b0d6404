"""``turnwatch demo``: the field reports reproduced with real tools, stopped, and shown."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from turnwatch.cli.common import (
    DemoLedgerOpt,
    JsonOpt,
    console,
    err,
    exporter_config,
    fail,
    ledger_errors,
    seconds,
)

#: Where ``demo --web`` serves its page unless told.
WEB_ADDR = "127.0.0.1:8321"


def demo(
    grace: Annotated[float, typer.Option(help="Grace window for process tools, seconds.")] = 2.0,
    ledger: DemoLedgerOpt = None,
    as_json: JsonOpt = False,
    serve_metrics: Annotated[
        str | None,
        typer.Option(
            "--serve-metrics",
            metavar="HOST:PORT",
            help="Afterwards, serve the demo's metrics here until Ctrl-C.",
        ),
    ] = None,
    web: Annotated[
        bool,
        typer.Option(
            "--web",
            help="Instead: keep the sessions running and serve the live page (Stop buttons, "
            "timelines), the metrics and POST /v1/events on --web-addr until Ctrl-C.",
        ),
    ] = False,
    web_addr: Annotated[
        str | None,
        typer.Option(
            metavar="HOST:PORT",
            help=f"With --web: where to serve the page [default: {WEB_ADDR}].",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Reproduce the field reports with real tools, stop them, and show what each stop did.

    Uses a temporary ledger unless --ledger is given.
    """
    # What is wrong with the command line is said before the demo's imports (a second).
    seconds("--grace", grace)
    if web_addr is not None and not web:
        raise fail("--web-addr needs --web")
    if web and as_json:
        raise fail("--json is for the demo without --web: with it, the page shows the sessions")
    if web and serve_metrics is not None:
        raise fail(
            "--serve-metrics is for the demo without --web: the page serves the metrics "
            "on --web-addr"
        )
    from turnwatch.cli import tables
    from turnwatch.cli.demo import run as demo_run

    if web:
        with exporter_config(), ledger_errors():
            try:
                demo_run.run_web(grace_s=grace, ledger=ledger, addr=web_addr or WEB_ADDR, err=err)
            except ValueError as exc:
                raise fail(f"--web-addr: {exc}") from None
        return

    def show(report: Any) -> None:
        if as_json:
            sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
        else:
            tables.demo_report(console, report)

    with exporter_config(), ledger_errors():
        try:
            demo_run.run(
                grace_s=grace,
                ledger=ledger,
                quiet=as_json,
                err=err,
                then=show,
                serve_addr=serve_metrics,
            )
        except ValueError as exc:
            raise fail(f"--serve-metrics: {exc}") from None
