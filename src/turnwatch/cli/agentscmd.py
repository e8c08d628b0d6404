"""``turnwatch ingest`` of the agent CLIs' session files: files and directories, each file's
format named or detected, into the ledger, spans and metrics."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import orjson

from turnwatch.cli.wiring import Wiring
from turnwatch.integrations.agentlogs import (
    FORMATS,
    NotASessionFile,
    Problem,
    Report,
    read_file,
    session_files,
)

#: ``--format`` values: the foreign-runtime event lines, or one of the CLIs.
EVENTS = "events"
FORMAT_NAMES = (EVENTS, *FORMATS)


def is_event_lines(path: Path) -> bool:
    """True when the file's first line is a turnwatch event (``kind`` and ``session``)."""
    try:
        with open(path, "rb") as f:
            for raw in f:
                if raw.strip():
                    obj = orjson.loads(raw)
                    return isinstance(obj, dict) and "kind" in obj and "session" in obj
    except (OSError, ValueError):
        return False
    return False


def run(
    sources: Iterable[Path],
    wiring: Wiring,
    *,
    fmt: str | None,
    keep_args: bool,
    on_problem: Callable[[Problem], None],
) -> Report:
    """Every session file of ``sources`` (files, or directories walked) into ``wiring``."""
    report = Report()
    for source in sources:
        # A directory named on the command line: every .jsonl under it, each one reported.
        files = session_files(source) if source.is_dir() else [source]
        for path in files:
            seen = len(report.problems)
            try:
                read_file(path, wiring.telemetry, fmt=fmt, keep_args=keep_args, report=report)
            except NotASessionFile as exc:
                report.problem(Problem(str(path), 0, str(exc).removeprefix(f"{path}: ")))
            except FileNotFoundError:
                report.problem(Problem(str(path), 0, "vanished before it could be read"))
            except OSError as exc:
                report.problem(Problem(str(path), 0, f"cannot read ({exc.strerror})"))
            for p in report.problems[seen:]:
                on_problem(p)
    return report
