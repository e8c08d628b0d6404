"""``turnwatch``: triage of pinned sessions. One module per command (``cli/commands/``), each
thin: parse, call the library, render.

Exit codes (design §7): 0 done, 1 findings remain (``watch --once``), 2 bad input.
Heavy imports (the OpenTelemetry SDK, psutil) happen inside the commands, so ``--help`` is fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

from turnwatch.cli.commands import (
    demo,
    explain,
    ingest,
    prune,
    recover,
    serve,
    serve_metrics,
    sessions,
    watch,
)

app = typer.Typer(
    name="turnwatch",
    help="Stop semantics for agent runtimes: trace every stop, find what still pins a session.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    # Help as wide as the terminal (click stops at 80): a wide one shows whole summaries.
    context_settings={"max_content_width": 200},
)


def _version(value: bool) -> None:
    if value:
        from turnwatch import __version__

        typer.echo(f"turnwatch {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """turnwatch: a user stop that preserves tool side-effect boundaries, and proof it did."""


app.command()(sessions.sessions)
app.command()(ingest.ingest)
app.command("serve-metrics")(serve_metrics.serve_metrics)
app.command()(serve.serve)
app.command()(explain.explain)
app.command()(recover.recover)
app.command()(watch.watch)
app.command()(demo.demo)
app.command()(prune.prune)


def main() -> None:
    """Console-script entry point. A usage error (an unknown option, a value that does not parse)
    is one line and exit 2, as every other bad input is: not click's usage block."""
    import sys

    try:
        code = app(standalone_mode=False)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except typer.Abort:  # Ctrl-C or EOF at a prompt
        sys.stderr.write("aborted\n")
        sys.exit(1)
    except typer.TyperException as exc:
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError":  # no command: the help, as before
            exc.show()  # type: ignore[attr-defined]
        else:
            hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
            message = " ".join(exc.format_message().split())
            sys.stderr.write(f"error: {message}{hint}\n")
        sys.exit(getattr(exc, "exit_code", 2))
    sys.exit(code if isinstance(code, int) else 0)
