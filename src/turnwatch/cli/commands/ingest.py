"""``turnwatch ingest``: events from a foreign runtime's JSON lines, or from the agent CLIs'
session files, into the ledger, spans and metrics."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from turnwatch.cli.common import (
    EXIT_BAD_INPUT,
    Capped,
    LedgerOpt,
    err,
    exporter_config,
    fail,
    ledger_path,
    reads_ledger,
    said_lost,
)
from turnwatch.cli.shown import show


@reads_ledger
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
    from turnwatch.cli import agent_files

    if fmt is not None and fmt not in agent_files.FORMAT_NAMES:
        raise fail(f"--format {fmt!r}: expected one of {', '.join(agent_files.FORMAT_NAMES)}")
    paths = [Path(s) for s in sources]
    events = fmt == agent_files.EVENTS or "-" in sources or follow
    if fmt is None and len(paths) == 1 and paths[0].is_file():
        events = events or agent_files.is_event_lines(paths[0])
    if events:
        if len(sources) != 1:
            raise fail("event lines are read from one file or - at a time")
        if fmt not in (None, agent_files.EVENTS):
            how = "--follow" if follow else "standard input (-)"
            raise fail(
                f"{how} is read as event lines; give {fmt} files by path "
                "(and follow them with `watch --agents`)"
            )
        _ingest_events(sources[0], ledger, follow)
    else:
        _ingest_agent_logs(paths, ledger, fmt, keep_args)


def _wire(ledger: Path | None) -> Any:
    from turnwatch.cli.wiring import wire
    from turnwatch.tracing.ledger import LedgerError

    try:
        with exporter_config():
            # A file can wait for the writer: nothing it holds is dropped for speed.
            return wire(ledger_path(ledger), dedup=True, wait=True)
    except LedgerError as exc:
        raise fail(str(exc)) from None


def _ingest_agent_logs(
    paths: list[Path], ledger: Path | None, fmt: str | None, keep_args: bool
) -> None:
    from turnwatch.cli import agent_files

    for p in paths:
        if not p.exists():
            raise fail(f"{p}: cannot read (No such file or directory)")
    wiring = _wire(ledger)
    problems = Capped(lambda m: show(err, m))
    try:
        report = agent_files.run(paths, wiring, fmt=fmt, keep_args=keep_args, on_problem=problems)
    finally:
        wiring.close()
        problems.finish()
    new, lost = wiring.ledger.written, wiring.ledger.lost
    unknown = sum(report.unknown.values())
    _summary(
        wiring,
        f"ingested {new} new event(s) from {report.files} session file(s) "
        f"({report.records} records, {unknown} of types not read) into {wiring.ledger.path}"
        + (f" ({already} already there)" if (already := report.events - new - lost) else "")
        + f"; {report.problem_count} problem(s)",
        bad=report.problem_count,
    )


def _ingest_events(source: str, ledger: Path | None, follow: bool) -> None:
    from turnwatch.cli import ingest_follow

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
        show(err, message)

    report = None
    problems = Capped(say)
    try:
        report = ingest_follow.run(
            path,
            wiring,
            follow=follow,
            say=say,
            on_bad=lambda b: problems(f"{name}:{b.lineno}: {b.reason}"),
        )
    except KeyboardInterrupt:
        pass
    finally:
        wiring.close()
        problems.finish()
    if report is None:
        return
    new, lost = wiring.ledger.written, wiring.ledger.lost
    _summary(
        wiring,
        f"ingested {new} new event(s) into {wiring.ledger.path}"
        + (f" ({already} already there)" if (already := report.good - new - lost) else "")
        + f"; rejected {report.bad_count} line(s)",
        bad=report.bad_count,
    )


def _summary(wiring: Any, line: str, *, bad: int) -> None:
    """The one line an ingest ends with; exit 2 if a line was rejected, else 1 if an event was
    lost."""
    show(err, line)
    if bad:
        if wiring.ledger.lost:
            fail(f"{wiring.ledger.lost} event(s) could not be written to {wiring.ledger.path}")
        raise typer.Exit(EXIT_BAD_INPUT)
    said_lost(wiring.ledger)
