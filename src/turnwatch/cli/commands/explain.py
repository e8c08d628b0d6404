"""``turnwatch explain``: one stop as a waterfall, and what still holds its session."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from turnwatch.cli.common import (
    GraceOpt,
    JsonOpt,
    LedgerOpt,
    config,
    console,
    err,
    fail,
    ledger_path,
    reads_ledger,
    said_left_out,
    seconds,
)
from turnwatch.cli.langgraph_threads import CheckpointsOpt, GraphOpt, QuietOpt
from turnwatch.cli.shown import show


@reads_ledger
def explain(
    ident: Annotated[str, typer.Argument(metavar="SESSION|TURN", help="A session or turn id.")],
    ledger: LedgerOpt = None,
    svg: Annotated[Path | None, typer.Option("--svg", help="Also save the picture as SVG.")] = None,
    grace: GraceOpt = 10.0,
    as_json: JsonOpt = False,
    langgraph_checkpoints: CheckpointsOpt = None,
    langgraph_graph: GraphOpt = None,
    langgraph_quiet: QuietOpt = 300.0,
) -> None:
    """The stop's timeline from click to idle, and what still holds the session (or, with
    --langgraph-checkpoints, the LangGraph thread)."""
    from dataclasses import asdict

    from turnwatch.cli import langgraph_threads as lg
    from turnwatch.cli import waterfall as ex
    from turnwatch.tracing.view import find_turn
    from turnwatch.watchdog.scan import scan

    seconds("--grace", grace)
    threads = lg.threads(langgraph_checkpoints, langgraph_graph, langgraph_quiet)
    lg_hint = lg.hint(threads, langgraph_graph)
    conn, dangling, ident = lg.ledger_for(
        threads, ledger, ident, lambda c, i: find_turn(c, i) is not None
    )
    found = None if conn is None else find_turn(conn, ident)
    if found is None:
        return lg.say(ident, dangling, as_json, lg_hint)
    findings = scan(conn, cfg=config(grace)).findings + dangling if threads else None
    result = ex.build(conn, *found, cfg=config(grace), findings=findings)
    if as_json:
        data = asdict(result)
        data["findings"] = [f.to_json() for f in result.findings]
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return said_left_out(ledger_path(ledger), result.left_out)
    hint = (f" --ledger {shlex.quote(str(ledger))}" if ledger else "") + (
        lg_hint if dangling else ""
    )
    out = Console(record=True, emoji=False) if svg else console
    ex.render(out, result, hint)
    if svg:
        try:
            out.save_svg(str(svg), title=f"turnwatch explain {ident}")
        except OSError as exc:
            raise fail(f"--svg {svg}: cannot write ({exc.strerror or exc})") from None
        show(err, f"saved {svg}")
    return said_left_out(ledger_path(ledger), result.left_out)
