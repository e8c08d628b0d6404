"""What every command shares: the consoles, the options, and one-line errors with exit 2.

Light on purpose: ``turnwatch --help`` imports this, and nothing heavy.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar, cast

import typer
from rich.console import Console

from turnwatch.tracing.paths import default_path

# No emoji codes: rich reads ``:fire:`` in a session id as one, and an id printed as ``s🔥1`` is
# an id no command knows. (Recorded text is printed as text, its controls escaped: cli.shown.)
console = Console(emoji=False)
err = Console(stderr=True, soft_wrap=True, emoji=False)  # one message, one line: grep-able

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2
P = ParamSpec("P")
R = TypeVar("R")

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
#: ``demo``'s: without it, the demo makes a temporary ledger (and removes it).
DemoLedgerOpt = Annotated[
    Path | None,
    typer.Option(
        "--ledger",
        help="Keep the demo's events in this ledger file [default: a temporary one].",
        show_default=False,
        readable=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
AddrOpt = Annotated[str, typer.Option("--metrics-addr", help="HOST:PORT of /metrics.")]


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print ``message`` to stderr; the caller raises the returned Exit.

    The message is text, never markup: ``pip install 'turnwatch[otlp-grpc]'`` must print whole.
    """
    err.print(f"[bold red]error:[/] {_escaped(message)}", highlight=False)
    return typer.Exit(code)


class Capped:
    """Say the first :attr:`limit` problems of a run, then only count them: a binary file is
    hundreds of bad lines, and the first few say what is wrong."""

    limit = 10

    def __init__(self, say: Callable[[str], None], unit: str = "unreadable line(s)") -> None:
        self.say = say
        self.unit = unit
        self.seen = 0

    def __call__(self, problem: object) -> None:
        if getattr(problem, "lineno", None) == 0:  # a whole file's verdict: always said
            self.say(str(problem))
            return
        self.seen += 1
        if self.seen <= self.limit:
            self.say(str(problem))

    def finish(self) -> None:
        """Say how many went unsaid."""
        if self.seen > self.limit:
            self.say(f"… and {self.seen - self.limit} more {self.unit}")


@contextmanager
def ledger_errors(path: Path | None = None) -> Iterator[None]:
    """A ledger a command cannot open or write (a read-only volume, a corrupt or foreign file, a
    directory), or one SQLite cannot read past opening it (a damaged page: "database disk image
    is malformed"; a disk's I/O error), is one line and exit 2, never a traceback. ``path``:
    the ledger's, for SQLite's words (a LedgerError names it already)."""
    import sqlite3

    from turnwatch.tracing.ledger_file import LedgerError

    try:
        yield
    except LedgerError as exc:
        raise fail(str(exc)) from None
    except sqlite3.Error as exc:
        raise fail(f"{path or 'the ledger'}: unreadable ledger ({exc})") from None


def reads_ledger(command: Callable[P, R]) -> Callable[P, R]:
    """``command`` (whose ``--ledger`` is :data:`LedgerOpt`) run in :func:`ledger_errors` of
    its ledger: whatever it reads or writes of it, a failure is one line and exit 2."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with ledger_errors(ledger_path(cast("Path | None", kwargs.get("ledger")))):
            return command(*args, **kwargs)

    return run


def said_left_out(
    path: Path, left_out: list[str], unit: str = "unreadable event(s), left out"
) -> None:
    """What a command that met damaged rows says as it ends (it showed the rest): each, with
    the file, then exit 2, as for any bad input whose good records were kept."""
    if not left_out:
        return
    capped = Capped(
        lambda m: err.print(f"[bold red]error:[/] {_escaped(f'{path}: {m}')}", highlight=False),
        unit,
    )
    for said in left_out:
        capped(said)
    capped.finish()
    raise typer.Exit(EXIT_BAD_INPUT)


def _escaped(message: str) -> str:
    from rich.markup import escape

    from turnwatch.cli.shown import visible

    return str(escape(visible(message)))


def said_lost(ledger: Any) -> None:
    """What a program says as it ends if its ledger lost events (a full disk past the backlog,
    a file that could not be written when it closed): the count, the file, the cause, exit 1."""
    if ledger is not None and ledger.lost:
        raise fail(
            f"{ledger.lost} event(s) could not be written to {ledger.path}: {ledger.lost_why}",
            EXIT_FINDINGS,
        )


#: Each duration option's bounds, seconds: a scan every nanosecond spins a core, ``inf`` sleeps
#: forever, a negative or NaN window is meaningless.
SECONDS: dict[str, tuple[float, float]] = {
    "--interval": (0.05, 86_400.0),
    "--poll": (0.05, 3_600.0),
    "--grace": (0.01, 3_600.0),
    "--pinned-after": (0.1, 31_536_000.0),
    "--overdue-after": (0.1, 31_536_000.0),
    "--langgraph-quiet": (0.0, 31_536_000.0),
}
#: Each size option's bounds, bytes.
BYTES: dict[str, tuple[int, int]] = {"--max-body": (1, 1 << 30)}


def seconds(option: str, value: float | None) -> None:
    """Exit 2 unless ``value`` (if given) is a finite number of seconds within ``option``'s
    bounds (:data:`SECONDS`), said in the one line with the unit and the bounds."""
    if value is None:
        return
    least, most = SECONDS[option]
    if not (math.isfinite(value) and least <= value <= most):
        raise fail(f"{option} takes seconds from {least:g} to {most:g}, got {value:g}")


#: A duration's units (``30d``); a bare number is seconds.
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}
#: The longest retention a duration may say: a century.
MAX_DURATION_S = 100 * 365 * 86_400.0


def duration(option: str, text: str) -> float:
    """``text`` (``30d``, ``12h``, ``90m``, ``3600s``, ``3600``) in seconds; exit 2 with one
    line for a zero, negative, NaN, unbounded or unparsable one."""
    body, unit = text.strip(), "s"
    if body and body[-1].lower() in _UNITS:
        body, unit = body[:-1], body[-1].lower()
    try:
        value = float(body) * _UNITS[unit]
    except ValueError:
        raise fail(
            f"{option} takes a duration such as 30d, 12h, 90m or 3600s, got {text!r}"
        ) from None
    if not (math.isfinite(value) and 0 < value <= MAX_DURATION_S):
        raise fail(f"{option} takes a duration above 0 and up to 100 years, got {text!r}")
    return value


def size(option: str, value: int) -> None:
    """Exit 2 unless ``value`` is a size in bytes within ``option``'s bounds (:data:`BYTES`)."""
    least, most = BYTES[option]
    if not least <= value <= most:
        raise fail(f"{option} takes bytes from {least} to {most}, got {value}")


@contextmanager
def exporter_config() -> Iterator[None]:
    """Exit 2 with the one line an exporter the environment asks for cannot be had."""
    try:
        yield
    except Exception as exc:
        # Only code that imported the exporters can raise their error: a look that builds
        # no spans (`watch --once`, `recover --dry-run`) does not import the SDK for this.
        otel = sys.modules.get("turnwatch.exporters.otel")
        if otel is not None and isinstance(exc, otel.ExporterConfigError):
            raise fail(str(exc)) from None
        raise


def ledger_path(path: Path | None) -> Path:
    return path if path is not None else default_path()


def read_conn(path: Path | None) -> Any:
    """A read-only connection, or exit 2 naming the file and the cause."""
    from turnwatch.tracing.ledger_file import LedgerError, connect

    try:
        return connect(ledger_path(path), readonly=True)
    except LedgerError as exc:
        raise fail(str(exc)) from None


def usable(path: Path) -> None:
    """Exit 2 now if a service cannot use the ledger at ``path``; one a writer is still creating
    (no tables yet) will do: the service reads it as empty until the schema is committed."""
    from turnwatch.tracing.ledger_file import LedgerError, LedgerNotReady, connect

    try:
        connect(path, readonly=True).close()
    except LedgerNotReady:
        return
    except LedgerError as exc:
        raise fail(str(exc)) from None


def unknown_session(conn: Any, ident: str, path: Path) -> typer.Exit:
    """Exit 2 naming the sessions that exist, the closest first; or, for one whose summary row
    the readers skip as damaged, what is wrong with it."""
    from turnwatch.runtime.session import closest
    from turnwatch.tracing.rows import damaged_summaries
    from turnwatch.tracing.view import session_ids

    damaged = damaged_summaries(conn, session=ident, limit=1)
    if damaged:
        return fail(f"{path}: {damaged[0]}: a damaged row, not read (explain and recover need it)")
    known = session_ids(conn)
    return fail(f"unknown session or turn {ident!r}; sessions: {closest(ident, known)}")


def config(
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
        metavar="SECONDS",
        help="A stop still pending this long (seconds) pins the session [default: 15].",
        show_default=False,
    ),
]
OverdueOpt = Annotated[
    float | None,
    typer.Option(
        "--overdue-after",
        metavar="SECONDS",
        help="A stopped mutating/extension call silent this long (seconds) is overdue "
        "[default: grace + 2].",
        show_default=False,
    ),
]
GraceOpt = Annotated[
    float,
    typer.Option(
        "--grace", help="The runtime's grace window, seconds (findings start 2 s after it)."
    ),
]


# --- the servers' options (serve, serve-metrics) ---

PollOpt = Annotated[
    float, typer.Option(metavar="SECONDS", help="Seconds between reads of new events.")
]
TokenOpt = Annotated[
    Path | None,
    typer.Option(
        metavar="FILE",
        help="Require this file's token as a bearer token on POST /v1/events (and, with serve, "
        "on the live page's Stop: open the page as /#token=TOKEN).",
    ),
]
OriginOpt = Annotated[
    list[str] | None,
    typer.Option(
        metavar="ORIGIN",
        help="A browser origin (other than this server's own) allowed to post events (repeatable).",
    ),
]
MaxBodyOpt = Annotated[
    int, typer.Option(metavar="BYTES", help="The largest POST /v1/events body, bytes.")
]
