"""The agent CLIs' session files into the ledger, spans and metrics: read once (``turnwatch
ingest``: files and directories, each file's format named or detected), or followed as the CLIs
write them, with the CLIs' processes attributed to their sessions (``turnwatch watch
--agents``)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

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
from turnwatch.integrations.agentlogs.follow import KEY_PREFIX, Follower
from turnwatch.tracing import codec
from turnwatch.tracing.ingest import MAX_LINE_BYTES
from turnwatch.tracing.ledger import (
    Ledger,
    LedgerError,
    LedgerNotReady,
    connect,
    get_meta,
    meta_keys,
)
from turnwatch.watchdog.agentprocs import Attributor

#: ``--format`` values: the foreign-runtime event lines, or one of the CLIs.
EVENTS = "events"
FORMAT_NAMES = (EVENTS, *FORMATS)


def is_event_lines(path: Path) -> bool:
    """True when the file's first line is a turnwatch event (``kind`` and ``session``)."""
    try:
        with open(path, "rb") as f:
            # At most a line's worth: a longer first line is no event line, and a file with no
            # newline in gigabytes was read whole here (the reader then skips it in chunks).
            while raw := f.readline(MAX_LINE_BYTES + 1):
                if len(raw) > MAX_LINE_BYTES:
                    return False
                if raw.strip():
                    obj = codec.loads(raw)  # a lone surrogate's escape too
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


class AgentWatch:
    """The agent CLIs seen two ways: their files, followed into the ledger, and their processes,
    attributed to the sessions those files name (``watchdog.agentprocs``)."""

    def __init__(
        self,
        ledger: Ledger,
        where: Mapping[str, Path],
        *,
        keep_args: bool,
        say: Callable[[str], None],
    ) -> None:
        self.ledger = ledger
        self.say = say
        self._unread: str | None = None  # why the ledger could not be read, while it cannot
        self.follower = Follower(
            where,
            lambda ev: ledger.append(ev, dedup=True, wait=True),  # files wait, lose nothing
            load=self._load,
            save=ledger.put_meta,
            forget=ledger.forget_meta,
            saved=self._saved,
            on_problem=lambda p: say(str(p)),
            note=say,
            keep_args=keep_args,
        )
        self.attributor = Attributor(ledger.append, say=say)

    def _open(self) -> sqlite3.Connection | None:
        """A read connection to the file now at the ledger's path, for one use. One held from
        poll to poll would read a rotated-away file for ever, and, sharing the name of the new
        file's WAL, pages of both (seen: sessions written after a rotation never looked at)."""
        try:
            conn = connect(self.ledger.path, readonly=True)
        except LedgerNotReady:
            return None  # the writer is creating it: nothing recorded to read yet
        except LedgerError as exc:
            if self._unread is None:
                self.say(f"{exc}; the agent CLIs' processes are looked at when it can be read")
            self._unread = str(exc)
            return None
        if self._unread is not None:
            self.say(f"{self.ledger.path}: readable again")
            self._unread = None
        return conn

    def _load(self, key: str) -> str | None:
        conn = self._open()
        if conn is None:
            return None  # read from the start: the writer's dedup keeps each event once
        with contextlib.closing(conn):
            return get_meta(conn, key)

    def _saved(self) -> list[str] | None:
        conn = self._open()
        if conn is None:
            return None
        with contextlib.closing(conn):
            return meta_keys(conn, KEY_PREFIX)

    def poll(self, *, final: bool = False) -> None:
        """Read what the files gained; then, with it recorded, look at the processes."""
        if self.follower.poll(final=final):
            self.ledger.flush(timeout=10)  # the attributor reads the sessions the files named
        conn = self._open()
        if conn is None:
            return
        with contextlib.closing(conn):
            if self.attributor.step(conn):
                self.ledger.flush(timeout=10)

    def close(self) -> None:
        self.follower.close()
