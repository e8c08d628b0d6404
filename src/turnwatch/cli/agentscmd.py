"""The agent CLIs' session files into the ledger, spans and metrics: read once (``turnwatch
ingest``: files and directories, each file's format named or detected), or followed as the CLIs
write them (``turnwatch watch --agents``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import orjson

from turnwatch.cli.wiring import Wiring
from turnwatch.integrations.agentlogs import (
    FORMATS,
    NotASessionFile,
    Problem,
    Report,
    default_roots,
    read_file,
    session_files,
)
from turnwatch.integrations.agentlogs.follow import Follower
from turnwatch.tracing.ledger import Ledger, connect, get_meta

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


def roots(
    codex: Path | None = None, claude: Path | None = None, gemini: Path | None = None
) -> dict[str, Path]:
    """Where to look for each CLI's session files: the defaults, each overridable."""
    out = default_roots()
    for fmt, given in (("codex", codex), ("claude-code", claude), ("gemini-cli", gemini)):
        if given is not None:
            out[fmt] = given
    return out


def make_follower(
    ledger: Ledger,
    where: Mapping[str, Path],
    *,
    keep_args: bool,
    say: Callable[[str], None],
) -> tuple[Follower, Callable[[], None]]:
    """A follower of the CLIs' files into ``ledger`` (deduplicated: a line read twice is
    recorded once), its places kept in the ledger; and what closes it."""
    conn = connect(ledger.path, readonly=True)

    def load(k: str) -> str | None:
        return get_meta(conn, k)

    follower = Follower(
        where,
        lambda ev: ledger.append(ev, dedup=True),
        load=load,
        save=ledger.put_meta,
        on_problem=lambda p: say(str(p)),
        note=say,
        keep_args=keep_args,
    )

    def close() -> None:
        follower.close()
        conn.close()

    return follower, close
