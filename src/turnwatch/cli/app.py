"""``turnwatch``: triage of pinned sessions. Commands are thin: parse, call the library, render.

Exit codes (design §7): 0 done, 1 findings remain (``watch --once``), 2 bad input.
Heavy imports (the OpenTelemetry SDK, psutil) happen inside the commands, so ``--help`` is fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from turnwatch import names
from turnwatch.cli import ingestcli, servecli, watchcli
from turnwatch.cli.common import (
    EXIT_FINDINGS,
    GraceOpt,
    JsonOpt,
    LedgerOpt,
    config,
    console,
    err,
    exporter_config,
    fail,
    ledger_path,
    positive,
    read_conn,
    unknown_session,
)

app = typer.Typer(
    name="turnwatch",
    help="Stop semantics for agent runtimes: trace every stop, find what still pins a session.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root() -> None:
    """turnwatch: a user stop that preserves tool side-effect boundaries, and proof it did."""


@app.command()
def sessions(
    ledger: LedgerOpt = None,
    pinned: Annotated[bool, typer.Option("--pinned", help="Only pinned sessions.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """One row per session: state, turn, since when, findings."""
    from turnwatch.cli import render
    from turnwatch.watchdog.scan import annotate_findings

    conn = read_conn(ledger)
    every = annotate_findings(conn)
    rows = [r for r in every if r.state == names.STATE_PINNED] if pinned else every
    if as_json:
        sys.stdout.write(json.dumps([r.to_json() for r in rows], indent=2) + "\n")
        return
    if pinned and not rows and every:
        console.print(f"no pinned sessions ({len(every)} session(s) in this ledger)")
        return
    render.sessions_table(console, rows)


app.command()(ingestcli.ingest)


app.command("serve-metrics")(servecli.serve_metrics)
app.command()(servecli.serve)


@app.command()
def explain(
    ident: Annotated[str, typer.Argument(metavar="SESSION|TURN", help="A session or turn id.")],
    ledger: LedgerOpt = None,
    svg: Annotated[Path | None, typer.Option("--svg", help="Also save the picture as SVG.")] = None,
    grace: GraceOpt = 10.0,
    as_json: JsonOpt = False,
) -> None:
    """The stop's timeline from click to idle, and what still holds the session."""
    from dataclasses import asdict

    from turnwatch.cli import explain as ex
    from turnwatch.tracing.view import find_turn

    positive("--grace", grace)
    conn = read_conn(ledger)
    found = find_turn(conn, ident)
    if found is None:
        raise unknown_session(conn, ident)
    result = ex.build(conn, *found, cfg=config(grace))
    if as_json:
        data = asdict(result)
        data["findings"] = [f.to_json() for f in result.findings]
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    hint = f" --ledger {ledger}" if ledger else ""
    out = Console(record=True) if svg else console
    ex.render(out, result, hint)
    if svg:
        out.save_svg(str(svg), title=f"turnwatch explain {ident}")
        err.print(f"saved {svg}")


@app.command()
def recover(
    session: Annotated[str, typer.Argument(help="The pinned session.")],
    ledger: LedgerOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what it would do.")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
    grace: GraceOpt = 10.0,
) -> None:
    """The abort walk for one pinned session, saying each action before taking it."""
    from turnwatch.cli.watchcmd import make_watchdog
    from turnwatch.runtime.model import RecoveryResult
    from turnwatch.tracing.view import session_ids

    positive("--grace", grace)
    conn = read_conn(ledger)
    if session not in session_ids(conn):
        raise unknown_session(conn, session)
    import asyncio

    with exporter_config():
        dog, close = make_watchdog(
            ledger_path(ledger),
            config(grace),
            recover=True,
            dry_run=False,
            say=lambda m: console.print(f"  {m}"),
        )
    try:
        findings = [f for f in dog.scan().findings if f.session == session]
        if not findings:
            console.print(f"nothing holds session {session}")
            return
        for a in asyncio.run(dog.act(findings, dry_run=True)):  # say it before doing it
            console.print(
                f"• {a.finding.kind}: would {a.action}" + (f" ({a.detail})" if a.detail else "")
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
        console.print(f"• {a.finding.kind}: {a.action} → {a.result} {a.detail}")
    if any(a.result in (RecoveryResult.FAILED, RecoveryResult.REFUSED) for a in done):
        raise typer.Exit(EXIT_FINDINGS)


app.command()(watchcli.watch)


@app.command()
def demo(
    grace: Annotated[float, typer.Option(help="Grace window for process tools, seconds.")] = 2.0,
    ledger: LedgerOpt = None,
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
        str, typer.Option(metavar="HOST:PORT", help="With --web: where to serve the page.")
    ] = "127.0.0.1:8321",
) -> None:
    """Reproduce the field reports with real tools, stop them, and show what each stop did.

    Uses a temporary ledger unless --ledger is given.
    """
    from turnwatch.cli import democmd, render

    positive("--grace", grace)
    if web:
        with exporter_config():
            try:
                democmd.run_web(grace_s=grace, ledger=ledger, addr=web_addr, err=err)
            except ValueError as exc:
                raise fail(f"--web-addr: {exc}") from None
        return

    def show(report: Any) -> None:
        if as_json:
            sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
        else:
            render.demo_report(console, report)

    with exporter_config():
        try:
            democmd.run(
                grace_s=grace,
                ledger=ledger,
                quiet=as_json,
                err=err,
                then=show,
                serve_addr=serve_metrics,
            )
        except ValueError as exc:
            raise fail(f"--serve-metrics: {exc}") from None


def main() -> None:
    """Console-script entry point."""
    app()
