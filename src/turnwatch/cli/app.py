"""``turnwatch``: triage of pinned sessions. Commands are thin: parse, call the library, render.

Exit codes (design §7): 0 done, 1 findings remain (``watch --once``), 2 bad input.
Heavy imports (the OpenTelemetry SDK, psutil) happen inside the commands, so ``--help`` is fast.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from turnwatch import names
from turnwatch.tracing.paths import default_path

app = typer.Typer(
    name="turnwatch",
    help="Stop semantics for agent runtimes: trace every stop, find what still pins a session.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
console = Console()
err = Console(stderr=True, soft_wrap=True)  # one message, one line: grep-able

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2

LedgerOpt = Annotated[
    Path | None,
    typer.Option(
        "--ledger",
        help="Ledger file [default: $TURNWATCH_LEDGER, else "
        f"$XDG_STATE_HOME/turnwatch/ledger.sqlite3; here {default_path()}].",
        show_default=False,
        readable=False,  # checked by the ledger itself, which says what is wrong in one line
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
AddrOpt = Annotated[str, typer.Option("--metrics-addr", help="HOST:PORT of /metrics.")]


@app.callback()
def _root() -> None:
    """turnwatch: a user stop that preserves tool side-effect boundaries, and proof it did."""


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print ``message`` to stderr; the caller raises the returned Exit.

    The message is text, never markup: ``pip install 'turnwatch[otlp-grpc]'`` must print whole.
    """
    from rich.markup import escape

    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def positive(option: str, value: float) -> None:
    """Exit 2 unless ``value`` > 0: a zero interval would spin a core, a negative window is
    meaningless."""
    if not value > 0:
        raise fail(f"{option} must be a positive number of seconds, got {value:g}")


@contextmanager
def exporter_config() -> Iterator[None]:
    """Exit 2 with the one line an exporter the environment asks for cannot be had."""
    from turnwatch.exporters.otel import ExporterConfigError

    try:
        yield
    except ExporterConfigError as exc:
        raise fail(str(exc)) from None


def ledger_path(path: Path | None) -> Path:
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
    every = annotate_findings(conn)
    rows = [r for r in every if r.state == names.STATE_PINNED] if pinned else every
    if as_json:
        sys.stdout.write(json.dumps([r.to_json() for r in rows], indent=2) + "\n")
        return
    if pinned and not rows and every:
        console.print(f"no pinned sessions ({len(every)} session(s) in this ledger)")
        return
    render.sessions_table(console, rows)


@app.command()
def ingest(
    sources: Annotated[
        list[str],
        typer.Argument(
            help="Files or directories: turnwatch event lines (- for standard input), or an "
            "agent CLI's session files (Codex, Claude Code, Gemini CLI).",
            show_default=False,
        ),
    ],
    ledger: LedgerOpt = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            help="Keep reading a growing file of event lines, through truncation and rotation, "
            "and resume where the last --follow of it stopped. A pipe ends at EOF. (Agent CLI "
            "files are followed by `watch --agents`.)",
        ),
    ] = False,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="events, codex, claude-code or gemini-cli [default: detected per file].",
            show_default=False,
        ),
    ] = None,
    keep_args: Annotated[
        bool,
        typer.Option(
            "--keep-args",
            help="Also keep each agent CLI tool call's arguments (commands, paths, patches: they "
            "may hold secrets), cut at 512 characters. Prompts and outputs are never kept.",
        ),
    ] = False,
) -> None:
    """Events into the ledger, spans and metrics: a foreign runtime's JSON lines, or the agent
    CLIs' own session files (read as the same events, with the CLIs' ids)."""
    from turnwatch.cli import agentscmd

    if fmt is not None and fmt not in agentscmd.FORMAT_NAMES:
        raise fail(f"--format {fmt!r}: expected one of {', '.join(agentscmd.FORMAT_NAMES)}")
    paths = [Path(s) for s in sources]
    events = fmt == agentscmd.EVENTS or "-" in sources or follow
    if fmt is None and len(paths) == 1 and paths[0].is_file():
        events = events or agentscmd.is_event_lines(paths[0])
    if events:
        if len(sources) != 1:
            raise fail("event lines are read from one file or - at a time")
        if fmt not in (None, agentscmd.EVENTS):
            raise fail(f"--follow reads event lines; follow {fmt} files with `watch --agents`")
        _ingest_events(sources[0], ledger, follow)
    else:
        _ingest_agent_logs(paths, ledger, fmt, keep_args)


def _wire(ledger: Path | None) -> Any:
    from turnwatch.cli.wiring import wire
    from turnwatch.tracing.ledger import LedgerError

    try:
        with exporter_config():
            return wire(ledger_path(ledger), dedup=True)
    except LedgerError as exc:
        raise fail(str(exc)) from None


def _ingest_agent_logs(
    paths: list[Path], ledger: Path | None, fmt: str | None, keep_args: bool
) -> None:
    from turnwatch.cli import agentscmd

    for p in paths:
        if not p.exists():
            raise fail(f"{p}: cannot read (No such file or directory)")
    wiring = _wire(ledger)
    try:
        report = agentscmd.run(
            paths,
            wiring,
            fmt=fmt,
            keep_args=keep_args,
            on_problem=lambda p: err.print(str(p), highlight=False, markup=False),
        )
    finally:
        wiring.close()
    new = wiring.ledger.written
    unknown = sum(report.unknown.values())
    err.print(
        f"ingested {new} new event(s) from {report.files} session file(s) "
        f"({report.records} records, {unknown} of types not read) into {wiring.ledger.path}"
        + (f" ({report.events - new} already there)" if report.events > new else "")
        + f"; {report.problem_count} problem(s)",
        highlight=False,
    )
    if wiring.ledger.lost:
        raise fail(f"{wiring.ledger.lost} event(s) could not be written to {wiring.ledger.path}")
    if report.problem_count:
        raise typer.Exit(EXIT_BAD_INPUT)


def _ingest_events(source: str, ledger: Path | None, follow: bool) -> None:
    from turnwatch.cli import ingestcmd

    if source == "-" and sys.stdin is None:  # started with standard input closed
        raise fail("-: standard input is closed")
    path = Path("/dev/stdin") if source == "-" else Path(source)
    name = "<stdin>" if source == "-" else source
    try:
        path.open("rb").close()
    except OSError as exc:
        raise fail(f"{name}: cannot read ({exc.strerror})") from None
    wiring = _wire(ledger)

    def say(message: str) -> None:
        err.print(message, highlight=False, markup=False)

    report = None
    try:
        report = ingestcmd.run(
            path,
            wiring,
            follow=follow,
            say=say,
            on_bad=lambda b: say(f"{name}:{b.lineno}: {b.reason}"),
        )
    except KeyboardInterrupt:
        pass
    finally:
        wiring.close()
    if report is None:
        return
    new = wiring.ledger.written
    err.print(
        f"ingested {new} new event(s) into {wiring.ledger.path}"
        + (f" ({report.good - new} already there)" if report.good > new else "")
        + f"; rejected {report.bad_count} line(s)",
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

    positive("--poll", poll)
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


def _config(
    grace: float, pinned_after: float | None = None, overdue_after: float | None = None
) -> Any:
    from turnwatch.watchdog.scan import Config

    return Config(
        grace_s=grace,
        **({"rpc_stuck_s": pinned_after} if pinned_after else {}),
        await_overdue_s=overdue_after,
    )


PinnedOpt = Annotated[
    float | None,
    typer.Option(
        "--pinned-after",
        help="A stop still pending this long pins the session [default: 15].",
        show_default=False,
    ),
]
OverdueOpt = Annotated[
    float | None,
    typer.Option(
        "--overdue-after",
        help="A stopped mutating/extension call silent this long is overdue [default: grace + 2].",
        show_default=False,
    ),
]
GraceOpt = Annotated[
    float,
    typer.Option(
        "--grace", help="The runtime's grace window, seconds (findings start 2 s after it)."
    ),
]


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
    result = ex.build(conn, *found, cfg=_config(grace))
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
            _config(grace),
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


@app.command()
def watch(
    ledger: LedgerOpt = None,
    once: Annotated[
        bool, typer.Option("--once", help="One scan, report, exit (recovers only with --recover).")
    ] = False,
    interval: Annotated[float, typer.Option(help="Seconds between scans.")] = 5.0,
    recover: Annotated[
        bool | None,
        typer.Option(
            "--recover/--no-recover",
            help="Recover what it finds "
            "[default: --recover for the loop, --no-recover with --once].",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say, do not act.")] = False,
    metrics_addr: Annotated[
        str | None, typer.Option("--metrics-addr", help="HOST:PORT of /metrics (loop only).")
    ] = "127.0.0.1:9464",
    grace: GraceOpt = 10.0,
    pinned_after: PinnedOpt = None,
    overdue_after: OverdueOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The watchdog: scan every --interval and recover what it finds.

    With --once it scans once and only reports, unless --recover is given: looking never kills.
    Exit 1 after --once when findings remain.
    """
    from turnwatch.cli import watchcmd
    from turnwatch.tracing.ledger import LedgerError

    positive("--interval", interval)
    positive("--grace", grace)
    recover = (not once) if recover is None else recover
    path = ledger_path(ledger)
    if once or path.exists():
        read_conn(path).close()  # exit 2 now if the ledger is unusable
    # The loop may start before any runtime has written a ledger (a service at boot): it makes
    # an empty one and watches it, rather than exiting and staying down.
    say = (lambda _m: None) if as_json else (lambda m: err.print(m, highlight=False))
    if not once:
        try:
            with exporter_config():
                watchcmd.loop(
                    path,
                    _config(grace, pinned_after, overdue_after),
                    interval_s=interval,
                    recover=recover,
                    dry_run=dry_run,
                    metrics_addr=metrics_addr,
                    say=say,
                )
        except (ValueError, OSError, LedgerError) as exc:
            raise fail(str(exc)) from None
        return
    with exporter_config():
        cycle = watchcmd.once(
            path,
            _config(grace, pinned_after, overdue_after),
            recover=recover,
            dry_run=dry_run,
            say=say,
        )
    actions = {id(a.finding): a for a in cycle.actions}
    rows = []
    for f in cycle.findings:
        a = actions.get(id(f))
        row = f.to_json()
        row["action"] = a.action if a else f.action
        row["result"] = a.result if a else "proposed"
        rows.append(row)
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    else:
        for r in rows:
            console.print(
                f"{r['kind']:<28} {r['session']:<16} pid {r['pid'] or '-':<8} "
                f"{r['action']} → {r['result']}",
                highlight=False,
            )
        if not rows:
            console.print("no findings")
    if cycle.unresolved:
        raise typer.Exit(EXIT_FINDINGS)


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
) -> None:
    """Reproduce the field reports with real tools, stop them, and show what each stop did.

    Uses a temporary ledger unless --ledger is given.
    """
    from turnwatch.cli import democmd, render

    positive("--grace", grace)

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
