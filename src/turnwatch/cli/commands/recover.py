"""``turnwatch recover``: the abort walk for one pinned session, each action said first."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from turnwatch.cli.common import (
    EXIT_FINDINGS,
    GraceOpt,
    LedgerOpt,
    config,
    console,
    exporter_config,
    fail,
    ledger_path,
    reads_ledger,
    seconds,
)
from turnwatch.cli.langgraph_threads import CheckpointsOpt, GraphOpt, QuietOpt
from turnwatch.cli.shown import show


@reads_ledger
def recover(
    session: Annotated[str, typer.Argument(help="The pinned session.")],
    ledger: LedgerOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what it would do.")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
    grace: GraceOpt = 10.0,
    langgraph_checkpoints: CheckpointsOpt = None,
    langgraph_graph: GraphOpt = None,
    langgraph_quiet: QuietOpt = 300.0,
) -> None:
    """The abort walk for one pinned session, saying each action before taking it.

    With --langgraph-checkpoints, SESSION may be a LangGraph thread a stopped or dead run left
    with unanswered tool calls: they are answered in its checkpoint through --langgraph-graph,
    once you say its run is over (--yes, or the prompt)."""
    from turnwatch.cli import langgraph_threads as lg
    from turnwatch.cli.watchdog_program import make_watchdog
    from turnwatch.runtime.model import RecoveryResult
    from turnwatch.tracing.view import session_ids
    from turnwatch.watchdog.holds import Hold, what_holds

    seconds("--grace", grace)
    threads = lg.threads(langgraph_checkpoints, langgraph_graph, langgraph_quiet)
    conn, _, session = lg.ledger_for(threads, ledger, session, lambda c, s: s in session_ids(c))
    if threads is not None:  # its operator answers for the run being over: asked, or --yes
        threads.vouched.add(session)
    import asyncio

    with exporter_config():
        dog, close = make_watchdog(
            ledger_path(ledger),
            config(grace),
            recover=True,
            dry_run=False,
            write=not dry_run,  # a dry run only looks: it records nothing
            say=lambda m: show(console, f"  {m}"),
            threads=threads,
        )
    try:
        # What explain says holds it, from the same function: the two never disagree.
        scanned = dog.scan().findings
        hold = (
            what_holds(conn, session, cfg=config(grace), findings=scanned)
            if conn is not None
            else Hold(session, [f for f in scanned if f.session == session])
        )
        findings = hold.findings
        if not hold.recoverable:
            for r in hold.reasons(time.time(), config(grace)):
                show(console, f"• {r}")
            show(console, hold.verdict())
            return
        for a in asyncio.run(dog.act(findings, dry_run=True)):  # say it before doing it
            show(
                console,
                f"• {a.finding.kind}: would {a.said}" + (f" ({a.detail})" if a.detail else ""),
            )
        if dry_run:
            return
        if not yes:
            if not sys.stdin.isatty():
                raise fail("refusing to recover without --yes: no terminal to ask on")
            typer.confirm("Take these actions?", abort=True)
        done = asyncio.run(dog.act(findings))
    finally:
        close()
    for a in done:
        show(console, f"• {a.finding.kind}: {a.said} → {a.result} {a.detail}")
    if any(a.result in (RecoveryResult.FAILED, RecoveryResult.REFUSED) for a in done):
        raise typer.Exit(EXIT_FINDINGS)
