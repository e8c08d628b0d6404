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

app = typer.Typer(
    name="turnwatch",
    help="Stop semantics for agent runtimes: trace every stop, find what still pins a session.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
console = Console()
err = Console(stderr=True, soft_wrap=True)  # one message, one line: grep-able

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2

LedgerOpt = Annotated[
    Path | None,
    typer.Option(
        "--ledger",
        help="Ledger file [default: $TURNWATCH_LEDGER, else "
        "$XDG_STATE_HOME/turnwatch/ledger.sqlite3].",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
AddrOpt = Annotated[str, typer.Option("--metrics-addr", help="HOST:PORT of /metrics.")]


@app.callback()
def _root() -> None:
    """turnwatch: a user stop that preserves tool side-effect boundaries, and proof it did."""


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print ``message`` to stderr; the caller raises the returned Exit."""
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


def ledger_path(path: Path | None) -> Path:
    from turnwatch.tracing.ledger import default_path

    return path if path is not None else default_path()


def read_conn(path: Path | None) -> Any:
    """A read-only connection, or exit 2 naming the file and the cause."""
    from turnwatch.tracing.ledger import LedgerError, connect

    try:
        return connect(ledger_path(path), readonly=True)
    except LedgerError as exc:
        raise fail(str(exc)) from None


def unknown_session(conn: Any, ident: str) -> typer.Exit:
    """Exit 2 naming the sessions that exist, the closest first."""
    from turnwatch.runtime.session import closest
    from turnwatch.tracing.view import session_ids

    known = session_ids(conn)
    return fail(f"unknown session or turn {ident!r}; sessions: {closest(ident, known)}")


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
    rows = annotate_findings(conn)
    if pinned:
        rows = [r for r in rows if r.state == "pinned"]
    if as_json:
        sys.stdout.write(json.dumps([r.to_json() for r in rows], indent=2) + "\n")
        return
    render.sessions_table(console, rows)


@app.command()
def ingest(
    source: Annotated[str, typer.Argument(help="A JSON-lines file, or - for standard input.")],
    ledger: LedgerOpt = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep reading a growing file.")] = False,
) -> None:
    """Foreign runtime events (JSON lines) into the ledger, spans and metrics."""
    from turnwatch.cli.wiring import wire
    from turnwatch.tracing.ingest import ingest as run_ingest
    from turnwatch.tracing.ledger import LedgerError

    try:
        wiring = wire(ledger_path(ledger), dedup=True)
    except LedgerError as exc:
        raise fail(str(exc)) from None
    try:
        stream = sys.stdin.buffer if source == "-" else open(source, "rb")  # noqa: SIM115
    except OSError as exc:
        wiring.close()
        raise fail(f"{source}: cannot read ({exc.strerror})") from None
    name = "<stdin>" if source == "-" else source
    try:
        report = run_ingest(
            stream,
            wiring.telemetry,
            follow=follow,
            on_bad=lambda b: err.print(
                f"{name}:{b.lineno}: {b.reason}", highlight=False, markup=False
            ),
        )
    except KeyboardInterrupt:
        report = None
    finally:
        wiring.close()
        if stream is not sys.stdin.buffer:
            stream.close()
    if report is None:
        return
    err.print(
        f"ingested {report.good} event(s) into {wiring.ledger.path}; "
        f"rejected {report.bad_count} line(s)",
        highlight=False,
    )
    if wiring.ledger.lost:
        raise fail(f"{wiring.ledger.lost} event(s) could not be written to {wiring.ledger.path}")
    if report.bad_count:
        raise typer.Exit(EXIT_BAD_INPUT)


@app.command("serve-metrics")
def serve_metrics(
    ledger: LedgerOpt = None,
    metrics_addr: AddrOpt = "127.0.0.1:9464",
    poll: Annotated[float, typer.Option(help="Seconds between reads of new events.")] = 1.0,
) -> None:
    """The metrics endpoint over a ledger: rebuilt from its events, then following new ones."""
    from turnwatch.cli.follow import serve_ledger_metrics

    path = ledger_path(ledger)
    read_conn(path).close()  # exit 2 now if the ledger is unusable
    try:
        serve_ledger_metrics(
            path, metrics_addr, poll_s=poll, say=lambda m: err.print(m, highlight=False)
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        return


@app.command()
def demo(
    grace: Annotated[float, typer.Option(help="Grace window for process tools, seconds.")] = 2.0,
    ledger: LedgerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Reproduce the field reports with real tools, stop them, and show what each stop did.

    Uses a temporary ledger unless --ledger is given.
    """
    import asyncio
    import tempfile

    from turnwatch.cli import render
    from turnwatch.cli.scenario import run_demo
    from turnwatch.cli.wiring import wire

    with tempfile.TemporaryDirectory(prefix="turnwatch-demo-") as tmp:
        path = ledger or Path(tmp) / "ledger.sqlite3"
        wiring = wire(path)
        try:
            report = asyncio.run(
                run_demo(
                    grace_s=grace,
                    workdir=Path(tmp),
                    sink=wiring.telemetry,
                    say=lambda m: err.print(f"[dim]· {m}[/]"),
                )
            )
        finally:
            wiring.close()
        report.ledger = str(path) if ledger else None
        if as_json:
            sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
            return
        render.demo_report(console, report)


def main() -> None:
    """Console-script entry point."""
    app()
