"""The LangGraph options of ``watch``, ``recover`` and ``explain``: a SQLite checkpointer's file
whose threads a stopped or dead run left with unanswered calls, and the graph that repairs them.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from turnwatch.cli.common import fail, seconds

if TYPE_CHECKING:
    from turnwatch.watchdog.scan import Finding
    from turnwatch.watchdog.threads import Threads

CheckpointsOpt = Annotated[
    Path | None,
    typer.Option(
        "--langgraph-checkpoints",
        metavar="PATH",
        help="A LangGraph SQLite checkpointer's file (langgraph-checkpoint-sqlite): its threads "
        "left with unanswered tool calls are findings (dangling_tool_calls). Read only.",
        readable=False,  # said in one line by the reader
    ),
]
GraphOpt = Annotated[
    str | None,
    typer.Option(
        "--langgraph-graph",
        metavar="MODULE:ATTR",
        help="The application's graph (compiled, or a StateGraph), imported from the current "
        "directory: what answers a dangling thread's calls in its checkpoint.",
    ),
]
QuietOpt = Annotated[
    float,
    typer.Option(
        "--langgraph-quiet",
        metavar="SECONDS",
        help="A dangling thread no turnwatch session accounts for is reported once its "
        "checkpoint is this old.",
    ),
]


def threads(checkpoints: Path | None, graph: str | None, quiet: float) -> Threads | None:
    """The watchdog's look at the file (None without one); exit 2 now, in one line, if the
    extra is missing, the file cannot be read or the graph cannot be imported."""
    seconds("--langgraph-quiet", quiet)
    if checkpoints is None:
        if graph is not None:
            raise fail("--langgraph-graph needs --langgraph-checkpoints")
        return None
    # The file first: a wrong path is said before LangGraph's imports (about two seconds).
    from turnwatch.integrations.langgraph_checkpoint_file import (
        CheckpointFileError,
        open_checkpoints,
    )

    try:
        open_checkpoints(checkpoints).close()
    except CheckpointFileError as exc:
        raise fail(f"--langgraph-checkpoints: {exc}") from None
    try:
        from turnwatch.integrations import langgraph_checkpoints as lc
        from turnwatch.watchdog.threads import Threads

        try:
            lc.CheckpointFile(checkpoints).scan()
        except CheckpointFileError as exc:
            raise fail(f"--langgraph-checkpoints: {exc}") from None
    except ImportError as exc:
        raise fail(
            f"--langgraph-checkpoints needs the langgraph extra ({exc.name} is not installed): "
            "pip install 'turnwatch[langgraph]'"
        ) from None
    try:
        loaded = lc.load_graph(_importable(graph)) if graph is not None else None
    except ValueError as exc:
        raise fail(f"--langgraph-graph: {exc}") from None
    return Threads(checkpoints, loaded, quiet)


def _importable(spec: str) -> str:
    """The application's modules are found from the current directory, as ``python -m`` finds
    them."""
    import sys

    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")
    return spec


def hint(threads: Threads | None, graph: str | None) -> str:
    """What ``recover`` needs on its command line to answer a dangling thread."""
    if threads is None:
        return ""
    return " " + shlex.join(
        ["--langgraph-checkpoints", str(threads.path), "--langgraph-graph", graph or "MODULE:ATTR"]
    )


def found(threads: Threads | None, conn: Any, ident: str) -> list[Finding]:
    """The dangling-thread findings of ``ident`` (a thread id; ``conn``: the ledger, or None)."""
    if threads is None:
        return []
    from turnwatch.integrations.langgraph_checkpoint_file import CheckpointFileError
    from turnwatch.runtime.procfs import ProcessTable

    try:
        every = threads.findings(conn, ProcessTable.scan())
    except CheckpointFileError as exc:
        raise fail(f"--langgraph-checkpoints: {exc}") from None
    return [f for f in every if f.session == ident]


def say(ident: str, findings: list[Finding], as_json: bool, recover_hint: str) -> None:
    """``explain`` of a thread no turnwatch session records: what holds it, and the repair."""
    import json
    import sys

    from turnwatch.cli.common import console
    from turnwatch.cli.shown import recover_with, show
    from turnwatch.watchdog.holds import reason, recover_command

    if as_json:
        data = {"session": ident, "findings": [f.to_json() for f in findings]}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    # Names as recorded: a thread id or tool name is never read as markup.
    show(console, f"LangGraph thread {ident} (no turnwatch session records it)")
    for f in findings:
        show(console, f"• {reason(f, 0.0)}", soft_wrap=True)
    recover_with(console, recover_command(ident) + recover_hint)


def nothing(ident: str, threads: Threads | None, ledger: Path) -> str:
    """The one line for an id neither the ledger (absent) nor the checkpoints know."""
    where = threads.path if threads is not None else "the checkpoints"
    return f"no dangling LangGraph thread {ident!r} in {where}, and no ledger at {ledger}"


def ledger_for(
    threads: Threads | None, ledger: Path | None, ident: str, known: Callable[[Any, str], bool]
) -> tuple[Any, list[Finding], str]:
    """The ledger's read connection (None: there is none yet, and a thread is looked at), the
    dangling findings of ``ident``, and ``ident`` as recorded: as typed, or as the commands
    show it (its control characters escaped, :mod:`turnwatch.cli.shown`; bytes not UTF-8
    as ``\\udcff``). Exit 2 in one line if neither knows it (``known(conn, ident)``: the
    ledger does)."""
    from turnwatch.cli.common import ledger_path, read_conn, unknown_session
    from turnwatch.cli.shown import typed_back
    from turnwatch.runtime.events import storable_text

    bare = threads is not None and not ledger_path(ledger).exists()
    conn = None if bare else read_conn(ledger)
    # Each form as the ledger keeps it: an argument holding bytes that are not UTF-8 (a
    # surrogate here) is kept escaped, as it is shown (runtime.events.storable_text).
    for asked in dict.fromkeys(storable_text(x) for x in (ident, typed_back(ident))):
        dangling = found(threads, conn, asked)
        if dangling or (conn is not None and known(conn, asked)):
            return conn, dangling, asked
    if conn is None:
        raise fail(nothing(ident, threads, ledger_path(ledger)))
    raise unknown_session(conn, ident, ledger_path(ledger))
