"""``turnwatch``: triage of pinned sessions. One module per command (``cli/commands/``), each
thin: parse, call the library, render.

Exit codes (design §7): 0 done, 1 findings remain (``watch --once``), 2 bad input.
Heavy imports (the OpenTelemetry SDK, psutil) happen inside the commands, so ``--help`` is fast.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Annotated, Any

import typer

from turnwatch.cli.entry import resume_gc

#: Each command's name → its module in ``cli/commands/`` (and its function, of the same name),
#: in the order ``--help`` lists them.
COMMANDS = {
    "sessions": "sessions",
    "ingest": "ingest",
    "serve-metrics": "serve_metrics",
    "serve": "serve",
    "explain": "explain",
    "recover": "recover",
    "watch": "watch",
    "demo": "demo",
    "prune": "prune",
}


def _version(value: bool) -> None:
    if value:
        from turnwatch import __version__

        typer.echo(f"turnwatch {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """turnwatch: a user stop that preserves tool side-effect boundaries, and proof it did."""


def build(only: str | None = None) -> typer.Typer:
    """The ``turnwatch`` app: every command, or only the one named ``only``.

    typer turns every parameter of every registered command into a click one before it parses
    (a pydantic adapter each: ~50 ms for the nine), so a run builds, and imports, only the
    command it runs; ``--help`` and a name that is no command get them all."""
    app = typer.Typer(
        name="turnwatch",
        help="Stop semantics for agent runtimes: trace every stop, find what still pins a session.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        # Help as wide as the terminal (click stops at 80): a wide one shows whole summaries.
        context_settings={"max_content_width": 200},
    )
    app.callback()(_root)
    for name, module in COMMANDS.items():
        if only is None or only == name:
            command = importlib.import_module(f"turnwatch.cli.commands.{module}")
            app.command(name)(_collecting(getattr(command, module)))
    return app


def _collecting(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command``, run with the garbage collector on: the console script pauses it while the
    command starts (:mod:`turnwatch.cli.entry`). typer reads the signature through the wrapper."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        resume_gc()
        return command(*args, **kwargs)

    return run


_app: typer.Typer | None = None


def __getattr__(name: str) -> typer.Typer:
    """``app``, every command registered, built when first asked for (tests, documentation)."""
    global _app
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _app is None:
        _app = build()
    return _app


def _command(argv: list[str]) -> str | None:
    """The command an argument list runs: its first word that is no option (the root takes
    only ``--version`` and ``--help``, neither with a value)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def main() -> None:
    """Console-script entry point. A usage error (an unknown option, a value that does not parse)
    is one line and exit 2, as every other bad input is: not click's usage block."""
    import sys

    try:
        code = build(_command(sys.argv[1:]))(standalone_mode=False)
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
