"""``turnwatch explain``: one stop as a waterfall, and what still holds its session."""

from __future__ import annotations

import json
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
    read_conn,
    seconds,
    unknown_session,
)


def explain(
    ident: Annotated[str, typer.Argument(metavar="SESSION|TURN", help="A session or turn id.")],
    ledger: LedgerOpt = None,
    svg: Annotated[Path | None, typer.Option("--svg", help="Also save the picture as SVG.")] = None,
    grace: GraceOpt = 10.0,
    as_json: JsonOpt = False,
) -> None:
    """The stop's timeline from click to idle, and what still holds the session."""
    from dataclasses import asdict

    from turnwatch.cli import waterfall as ex
    from turnwatch.tracing.view import find_turn

    seconds("--grace", grace)
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
        try:
            out.save_svg(str(svg), title=f"turnwatch explain {ident}")
        except OSError as exc:
            raise fail(f"--svg {svg}: cannot write ({exc.strerror or exc})") from None
        err.print(f"saved {svg}")
