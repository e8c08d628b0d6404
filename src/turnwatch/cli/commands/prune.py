"""``turnwatch prune``: the ledger's retention — the rows of sessions settled long ago, deleted."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from turnwatch.tracing.prune import Pruned

from turnwatch.cli.common import (
    JsonOpt,
    LedgerOpt,
    console,
    duration,
    fail,
    ledger_path,
    reads_ledger,
)


@reads_ledger
def prune(
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="DURATION",
            help="Delete the sessions settled longer ago than this: 30d, 12h, 90m, 3600s.",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say, do not delete.")] = False,
    vacuum: Annotated[
        bool,
        typer.Option(
            "--vacuum",
            help="Convert an older ledger so that pruning shrinks the file (rewrites it whole: "
            "needs its size free beside it; writers wait meanwhile).",
        ),
    ] = False,
    ledger: LedgerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete every row of the sessions settled before --older-than: never one still processing,
    with an open finding, or with a recorded process alive."""
    from turnwatch.tracing import prune as retention
    from turnwatch.tracing.ledger import connect
    from turnwatch.tracing.rows import shadow_summaries
    from turnwatch.watchdog.scan import lives, scan

    if older_than is None and not vacuum:
        raise fail("prune: give --older-than DURATION (and/or --vacuum)")
    span = duration("--older-than", older_than) if older_than is not None else None
    path = ledger_path(ledger)
    # A dry run only reads: opened for writing, it would create a missing ledger, bring an
    # older one up to date, and write a damaged one it was asked only to look at.
    conn = connect(path, readonly=dry_run)
    try:
        out: dict[str, object] = {}
        if vacuum:
            out["vacuum"] = _vacuum(conn, path, dry_run, quiet=as_json)
        if span is not None:
            shadow_summaries(conn)  # the scan reads as any reader does (read-only: done)
            found = scan(conn)
            keep = {f.session for f in found.findings}
            live = None if found.table is None else partial(lives, table=found.table)
            done = retention.prune(conn, time.time() - span, keep=keep, dry_run=dry_run, live=live)
            out["pruned"] = done.to_json()
            if not as_json:
                _say(done)
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc):
            raise fail(f"{path}: {exc}") from None
        held = ", ".join(retention.holders(path)) or "another process"
        raise fail(f"{path}: locked by {held} past the busy timeout; nothing was deleted") from None
    finally:
        conn.close()
    if as_json:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")


def _vacuum(conn: sqlite3.Connection, path: Path, dry_run: bool, *, quiet: bool) -> str:
    from turnwatch.tracing import prune as retention
    from turnwatch.tracing.ledger import LedgerError

    (mode,) = conn.execute("PRAGMA auto_vacuum").fetchone()
    if mode == 2:
        if not quiet:
            console.print("the ledger already gives pruned pages back (auto_vacuum incremental)")
        return "already"
    size = retention.file_bytes(conn)
    if not quiet:
        console.print(
            f"rewriting {size / 1e6:.1f} MB (about {max(size / 50e6, 0.1):.0f} s at 50 MB/s; "
            f"it needs about that much free beside it, and writers wait meanwhile)"
        )
    if dry_run:
        return "dry_run"
    try:
        took = retention.vacuum(conn, path)
    except LedgerError as exc:
        raise fail(str(exc)) from None
    if not quiet:
        console.print(f"done in {took:.1f} s: pruning now shrinks the file")
    return "done"


def _say(done: Pruned) -> None:
    when = datetime.fromtimestamp(done.horizon).isoformat(sep=" ", timespec="seconds")
    verb = "would delete" if done.dry_run else "deleted"
    console.print(
        f"{verb} {done.sessions} session(s) settled before {when}: {done.calls} call(s), "
        f"{done.events} event(s)"
        + (f"; {done.freed_bytes / 1e6:.1f} MB given back" if done.freed_bytes else "")
    )
    if done.kept:
        kept = ", ".join(f"{n} {why.replace('_', ' ')}" for why, n in sorted(done.kept.items()))
        console.print(f"kept, though as old: {kept}")
