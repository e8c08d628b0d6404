"""``turnwatch sessions``: one row per session, its state, turn and findings."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from turnwatch.cli.common import JsonOpt, LedgerOpt, console, read_conn
from turnwatch.runtime.model import SessionStatus


def sessions(
    ledger: LedgerOpt = None,
    pinned: Annotated[bool, typer.Option("--pinned", help="Only pinned sessions.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """One row per session: state, turn, since when, findings."""
    from turnwatch.cli import tables
    from turnwatch.watchdog.scan import annotate_findings

    conn = read_conn(ledger)
    every = annotate_findings(conn)
    rows = [r for r in every if r.state == SessionStatus.PINNED] if pinned else every
    if as_json:
        sys.stdout.write(json.dumps([r.to_json() for r in rows], indent=2) + "\n")
        return
    if pinned and not rows and every:
        console.print(f"no pinned sessions ({len(every)} session(s) in this ledger)")
        return
    tables.sessions_table(console, rows)
