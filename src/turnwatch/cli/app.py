"""``turnwatch``: triage of pinned sessions. Commands are thin: parse, call the library, render."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer
from rich.console import Console

app = typer.Typer(
    name="turnwatch",
    help="Stop semantics for agent runtimes: trace every stop, find what still pins a session.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console()
err = Console(stderr=True)


@app.callback()
def _root() -> None:
    """turnwatch: a user stop that preserves tool side-effect boundaries, and proof it did."""


@app.command()
def demo(
    grace: Annotated[float, typer.Option(help="Grace window for process tools, seconds.")] = 2.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Reproduce the field reports with real tools, stop them, and show what each stop did."""
    from turnwatch.cli import render
    from turnwatch.cli.scenario import run_demo

    report = asyncio.run(run_demo(grace_s=grace, say=lambda m: err.print(f"[dim]· {m}[/]")))
    if as_json:
        console.print_json(json.dumps(report.to_json()))
        return
    render.demo_report(console, report)


def main() -> None:
    """Console-script entry point."""
    app()
