"""``turnwatch serve-metrics`` and ``turnwatch serve``: a ledger's metrics, ``POST /v1/events``
and the live page, on one address."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from turnwatch.cli.common import (
    AddrOpt,
    LedgerOpt,
    err,
    fail,
    ledger_path,
    positive,
    read_conn,
)

PollOpt = Annotated[
    float, typer.Option(metavar="SECONDS", help="Seconds between reads of new events.")
]
TokenOpt = Annotated[
    Path | None,
    typer.Option(
        metavar="FILE",
        help="Require this file's token as a bearer token on POST /v1/events (and, with serve, "
        "on the live page's Stop: open the page as /#token=TOKEN).",
    ),
]
OriginOpt = Annotated[
    list[str] | None,
    typer.Option(
        metavar="ORIGIN",
        help="A browser origin (other than this server's own) allowed to post events (repeatable).",
    ),
]
MaxBodyOpt = Annotated[
    int, typer.Option(metavar="BYTES", help="The largest POST /v1/events body, bytes.")
]


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
    _serve(ledger, metrics_addr, poll, events, token_file, cors_origin, max_body, page=False)


def serve(
    ledger: LedgerOpt = None,
    addr: Annotated[str, typer.Option(metavar="HOST:PORT", help="Where to serve.")] = (
        "127.0.0.1:8321"
    ),
    poll: PollOpt = 1.0,
    token_file: TokenOpt = None,
    cors_origin: OriginOpt = None,
    max_body: MaxBodyOpt = 1024 * 1024,
) -> None:
    """The live page (sessions, Stop, timelines), POST /v1/events and /metrics over a ledger.

    Stop reaches a session's runtime through the control endpoint it recorded.
    """
    _serve(ledger, addr, poll, True, token_file, cors_origin, max_body, page=True)


def _serve(
    ledger: Path | None,
    addr: str,
    poll: float,
    events: bool,
    token_file: Path | None,
    cors_origin: list[str] | None,
    max_body: int,
    *,
    page: bool,
) -> None:
    from turnwatch.cli.follow import EventsOptions, serve_ledger_metrics

    positive("--poll", poll)
    positive("--max-body", max_body)
    path = ledger_path(ledger)
    read_conn(path).close()  # exit 2 now if the ledger is unusable
    opts = None
    if events:
        token = None
        if token_file is not None:
            try:
                token = token_file.read_text().strip()
            except OSError as exc:
                raise fail(f"{token_file}: cannot read ({exc.strerror})") from None
            if not token:
                raise fail(f"{token_file}: empty; a token file holds the token")
        opts = EventsOptions(token, tuple(cors_origin or ()), max_body)
    try:
        serve_ledger_metrics(
            path,
            addr,
            poll_s=poll,
            say=lambda m: err.print(m, highlight=False, soft_wrap=True),
            events=opts,
            page=page,
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        return
