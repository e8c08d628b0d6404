"""``turnwatch serve-metrics``: the metrics endpoint over a ledger, rebuilt from its events and
then following new ones."""

from __future__ import annotations

from typing import Annotated

import typer

from turnwatch.cli.commands.serve import run_server
from turnwatch.cli.common import (
    AddrOpt,
    LedgerOpt,
    MaxBodyOpt,
    OriginOpt,
    PollOpt,
    TokenOpt,
    reads_ledger,
)


@reads_ledger
def serve_metrics(
    ledger: LedgerOpt = None,
    metrics_addr: AddrOpt = "127.0.0.1:9464",
    poll: PollOpt = 1.0,
    events: Annotated[
        bool,
        typer.Option(
            "--events",
            help="Also accept POST /v1/events (JSON lines, validated as ingest does; a request "
            "with a bad line stores nothing).",
        ),
    ] = False,
    token_file: TokenOpt = None,
    cors_origin: OriginOpt = None,
    max_body: MaxBodyOpt = 1024 * 1024,
) -> None:
    """The metrics endpoint over a ledger: rebuilt from its events, then following new ones."""
    run_server(ledger, metrics_addr, poll, events, token_file, cors_origin, max_body, page=False)
