"""``turnwatch watch``: the watchdog loop, or one scan; with ``--agents``, following the agent
CLIs' session files into the same ledger."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from turnwatch.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FINDINGS,
    GraceOpt,
    JsonOpt,
    LedgerOpt,
    OverdueOpt,
    PinnedOpt,
    config,
    console,
    duration,
    err,
    exporter_config,
    fail,
    ledger_path,
    read_conn,
    reads_ledger,
    seconds,
    usable,
)
from turnwatch.cli.langgraph_threads import CheckpointsOpt, GraphOpt, QuietOpt
from turnwatch.cli.shown import show

if TYPE_CHECKING:
    from turnwatch.watchdog.loop import Cycle


@reads_ledger
def watch(
    ledger: LedgerOpt = None,
    once: Annotated[
        bool, typer.Option("--once", help="One scan, report, exit (recovers only with --recover).")
    ] = False,
    interval: Annotated[
        float, typer.Option(metavar="SECONDS", help="Seconds between scans.")
    ] = 5.0,
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
    agents: Annotated[
        bool,
        typer.Option(
            "--agents",
            help="Also follow the agent CLIs' session files into the ledger (Codex, Claude "
            "Code, Gemini CLI), resuming where the last run stopped.",
        ),
    ] = False,
    codex_dir: Annotated[
        Path | None,
        typer.Option(help="Codex rollouts [default: $CODEX_HOME/sessions, ~/.codex/sessions]."),
    ] = None,
    claude_dir: Annotated[
        Path | None,
        typer.Option(
            help="Claude Code transcripts "
            "[default: $CLAUDE_CONFIG_DIR/projects, ~/.claude/projects]."
        ),
    ] = None,
    gemini_dir: Annotated[
        Path | None, typer.Option(help="Gemini CLI chats [default: ~/.gemini/tmp].")
    ] = None,
    keep_args: Annotated[
        bool,
        typer.Option(
            "--keep-args",
            help="With --agents: also keep each tool call's arguments (they may hold secrets).",
        ),
    ] = False,
    retain: Annotated[
        str | None,
        typer.Option(
            "--retain",
            metavar="DURATION",
            help="Prune the sessions settled longer ago than this (30d, 12h), at start and "
            "every 10 min; never one processing, with an open finding or a live process. "
            "Off unless given.",
        ),
    ] = None,
    langgraph_checkpoints: CheckpointsOpt = None,
    langgraph_graph: GraphOpt = None,
    langgraph_quiet: QuietOpt = 300.0,
) -> None:
    """The watchdog: scan every --interval and recover what it finds.

    With --once it scans once and only reports, unless --recover is given: looking never kills.
    Exit 1 after --once when findings remain.
    """
    if not agents:  # read only while following the agent CLIs' files: never dropped unsaid
        for given, option in (
            (keep_args, "--keep-args"),
            (codex_dir, "--codex-dir"),
            (claude_dir, "--claude-dir"),
            (gemini_dir, "--gemini-dir"),
        ):
            if given:
                raise fail(f"{option} needs --agents")
    from turnwatch.cli import langgraph_threads, watchdog_program

    seconds("--interval", interval)
    seconds("--grace", grace)
    seconds("--pinned-after", pinned_after)
    seconds("--overdue-after", overdue_after)
    retain_s = duration("--retain", retain) if retain is not None else None
    recover = (not once) if recover is None else recover
    path = ledger_path(ledger)
    threads = langgraph_threads.threads(langgraph_checkpoints, langgraph_graph, langgraph_quiet)
    # Exit 2 now if the ledger is unusable. The loop may start before any runtime has written
    # a ledger (a service at boot), or while one is creating it: it makes an empty one, or
    # waits for the schema, and watches it, rather than exiting and staying down.
    if once and not agents and threads is None:
        read_conn(path).close()
    elif path.exists():
        usable(path)
    say = (lambda _m: None) if as_json else (lambda m: show(err, m))
    follow = None
    if agents:
        from turnwatch.cli.agent_files import roots

        where = roots(codex_dir, claude_dir, gemini_dir)
        follow = watchdog_program.Agents(where, keep_args=keep_args, thread=not once, say=say)
    cfg = config(grace, pinned_after, overdue_after)
    if not once:
        try:
            with exporter_config():
                watchdog_program.loop(
                    path,
                    cfg,
                    interval_s=interval,
                    recover=recover,
                    dry_run=dry_run,
                    metrics_addr=metrics_addr,
                    say=say,
                    agents=follow,
                    retain_s=retain_s,
                    threads=threads,
                )
        except (ValueError, OSError) as exc:
            raise fail(str(exc)) from None
        return
    with exporter_config():
        cycle = watchdog_program.once(
            path,
            cfg,
            recover=recover,
            dry_run=dry_run,
            say=say,
            agents=follow,
            retain_s=retain_s,
            threads=threads,
        )
    _show(cycle, as_json)
    if cycle.unresolved:
        raise typer.Exit(EXIT_FINDINGS)
    if cycle.damaged:  # said as it scanned: sessions it could not judge, so not "done"
        raise typer.Exit(EXIT_BAD_INPUT)


def _show(cycle: Cycle, as_json: bool) -> None:
    """One pass's findings, each with what was done: a table, or JSON."""
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
            head = f"{r['kind']:<28} {r['session']:<16} pid {r['pid'] or '-':<8}"
            what = f"{r['action']} → {r['result']}"
            if len(head) + 1 + len(what) > console.width:  # stacked: a command is never broken
                show(console, head.rstrip(), soft_wrap=True)
                show(console, f"  {what}", soft_wrap=True)
            else:
                show(console, f"{head} {what}")
        if not rows:
            console.print("no findings")
