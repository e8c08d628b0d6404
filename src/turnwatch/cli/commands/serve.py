"""``turnwatch serve``: the live page, ``POST /v1/events`` and ``/metrics`` over a ledger, on one
address (and the server ``serve-metrics`` shares)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from turnwatch.cli.common import (
    GraceOpt,
    LedgerOpt,
    MaxBodyOpt,
    OriginOpt,
    PollOpt,
    TokenOpt,
    err,
    fail,
    ledger_path,
    reads_ledger,
    said_lost,
    seconds,
    size,
    usable,
)
from turnwatch.cli.shown import show


@reads_ledger
def serve(
    ledger: LedgerOpt = None,
    addr: Annotated[str, typer.Option(metavar="HOST:PORT", help="Where to serve.")] = (
        "127.0.0.1:8321"
    ),
    poll: PollOpt = 1.0,
    token_file: TokenOpt = None,
    cors_origin: OriginOpt = None,
    max_body: MaxBodyOpt = 1024 * 1024,
    grace: GraceOpt = 10.0,
) -> None:
    """The live page (sessions, Stop, Recover, timelines), POST /v1/events and /metrics over a
    ledger.

    Stop reaches a session's runtime through the control endpoint it recorded; Recover does what
    ``turnwatch recover`` does (its plan shown first), with --grace as its window.
    """
    seconds("--grace", grace)
    run_server(ledger, addr, poll, True, token_file, cors_origin, max_body, page=True, grace=grace)


def run_server(
    ledger: Path | None,
    addr: str,
    poll: float,
    events: bool,
    token_file: Path | None,
    cors_origin: list[str] | None,
    max_body: int,
    *,
    page: bool,
    grace: float = 10.0,
) -> None:
    from turnwatch.cli.metrics_server import EventsOptions, serve_ledger_metrics

    seconds("--poll", poll)
    size("--max-body", max_body)
    path = ledger_path(ledger)
    usable(path)  # exit 2 now if the ledger is unusable
    opts = None
    if not events and (token_file is not None or cors_origin):
        given = (
            f"--token-file {token_file}"
            if token_file is not None
            else f"--cors-origin {(cors_origin or [''])[0]}"
        )
        raise fail(
            f"{given}: it guards POST /v1/events, which this serves only with --events "
            "(add --events, or leave it out)"
        )
    for origin in cors_origin or ():
        origin_or_fail(origin)
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
        written = serve_ledger_metrics(
            path,
            addr,
            poll_s=poll,
            say=lambda m: show(err, m, soft_wrap=True),
            events=opts,
            page=page,
            grace_s=grace,
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        return
    said_lost(written)


def origin_or_fail(origin: str) -> str:
    """A browser origin as a browser sends it (``https://ui.example:8443``: a scheme, a host,
    perhaps a port, nothing else); else one line and exit 2."""
    from urllib.parse import urlsplit

    try:
        u = urlsplit(origin)
        ok = (
            u.scheme in ("http", "https")
            and bool(u.hostname)
            and u.username is None
            and u.path == ""
            and not (u.query or u.fragment)
            and (u.port is None or 0 < u.port < 65536)
        )
    except ValueError:
        ok = False
    if not ok:
        raise fail(
            f"--cors-origin {origin!r}: not an origin; write it as a browser sends it, "
            "scheme://host[:port] (https://ui.example:8443)"
        )
    return origin
