"""``turnwatch sessions``: one row per session, its state, turn and findings."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from turnwatch.cli.common import (
    JsonOpt,
    LedgerOpt,
    console,
    fail,
    ledger_path,
    read_conn,
    reads_ledger,
    said_left_out,
)
from turnwatch.runtime.model import SessionStatus

#: ``sessions`` shows this many of the most recent (and every one still processing).
DEFAULT_LIMIT = 50


@reads_ledger
def sessions(
    ledger: LedgerOpt = None,
    pinned: Annotated[bool, typer.Option("--pinned", help="Only pinned sessions.")] = False,
    limit: Annotated[
        int,
        typer.Option(
            "--limit",
            metavar="N",
            help="Show the N most recent sessions (and every one still processing).",
        ),
    ] = DEFAULT_LIMIT,
    every: Annotated[
        bool, typer.Option("--all", help="Every session the ledger holds (a long list).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """One row per session: state, turn, since when, findings. The most recent 50 (and every
    session still processing) unless --limit or --all says otherwise."""
    from turnwatch.cli import tables
    from turnwatch.tracing import view
    from turnwatch.tracing.rows import damaged_summaries
    from turnwatch.watchdog.scan import annotate_findings

    if limit < 1:
        raise fail(f"--limit: {limit} is not a number of sessions (1 or more)")
    conn = read_conn(ledger)
    if pinned:
        rows = [
            r for r in annotate_findings(conn, processing=True) if r.state == SessionStatus.PINNED
        ]
    else:
        rows = annotate_findings(conn, limit=None if every else limit)
    held = view.count(conn)
    # Rows the readers skip as damaged: of the sessions still processing (what can be pinned,
    # through its index), or of every session with --all.
    damaged = [f"{d}: not shown" for d in damaged_summaries(conn, processing=not every)]
    if as_json:
        sys.stdout.write(json.dumps([r.to_json() for r in rows], indent=2) + "\n")
    elif pinned and not rows and held:
        console.print(f"no pinned sessions ({held} session(s) in this ledger)")
    else:
        tables.sessions_table(console, rows)
        hidden = held - len(rows)
        if hidden > 0 and not pinned:
            console.print(f"{hidden} older session(s) not shown (--limit N, or --all)")
    said_left_out(ledger_path(ledger), damaged, "damaged row(s)")
