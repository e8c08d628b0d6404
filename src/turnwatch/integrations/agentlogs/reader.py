"""Reading session files to their end: the records of one file into events, with every bad
line reported by file and line and every good one kept."""

from __future__ import annotations

import contextlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from turnwatch.integrations.agentlogs.base import BadRecord, Translator
from turnwatch.integrations.agentlogs.formats import FORMATS, sniff
from turnwatch.runtime.events import Event
from turnwatch.runtime.lines import CHUNK, LineReader, Oversized
from turnwatch.runtime.model import TurnwatchError

#: Without ``--format``, a file none of whose first lines is a record of a known CLI is refused.
SNIFF_LINES = 20
MAX_REPORTED = 1000


class NotASessionFile(TurnwatchError, ValueError):
    """The file is none of the formats (or not the one asked for)."""


@dataclass(frozen=True)
class Problem:
    """A line (or a file, line 0) that could not be read, and why."""

    path: str
    lineno: int
    reason: str

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.lineno}: {self.reason}"
            if self.lineno
            else f"{self.path}: {self.reason}"
        )


@dataclass
class Report:
    """What reading did: counts, and the problems (the first :data:`MAX_REPORTED`)."""

    files: int = 0
    records: int = 0
    events: int = 0
    problems: list[Problem] = field(default_factory=list)
    problem_count: int = 0
    unknown: Counter[str] = field(default_factory=Counter)

    def problem(self, p: Problem) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_REPORTED:
            self.problems.append(p)


def parse(raw: bytes | Oversized) -> Any:
    """One line → its JSON value; raises ValueError with what is wrong (blank → None)."""
    if isinstance(raw, Oversized):
        raise ValueError(f"line is {raw.size} bytes, over the {LineReader().cap} limit; skipped")
    if not raw.strip():
        return None
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8: byte {exc.start + 1} is {raw[exc.start]:#04x}") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if _SURROGATE_ESCAPE.search(raw) is not None:
            # A lone surrogate's escape is JSON (Node's JSON.stringify writes one for a broken
            # UTF-16 string) that orjson refuses: read as the standard library reads it.
            with contextlib.suppress(ValueError):
                return json.loads(raw, parse_constant=_refuse)
        what = "truncated" if not raw.endswith(b"\n") else "not JSON"
        raise ValueError(f"{what}: {exc}") from None


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def read_file(
    path: Path,
    sink: Callable[[Event], None],
    *,
    fmt: str | None = None,
    keep_args: bool = False,
    report: Report | None = None,
) -> Report:
    """Every record of ``path`` into ``sink`` as events. ``fmt`` None: detected from the file.

    Raises :class:`NotASessionFile` when nothing in the file is of the format (or of any), and
    OSError when it cannot be opened.
    """
    report = report if report is not None else Report()
    name = str(path)
    with open(path, "rb") as f:
        problems_before = report.problem_count
        numbered = _records(f, name, report)
        first: list[tuple[int, Any]] = []
        if fmt is None:
            for lineno, rec in numbered:
                first.append((lineno, rec))
                fmt = sniff(rec)
                if fmt is not None or len(first) >= SNIFF_LINES:
                    break
            if fmt is None and not first and report.problem_count == problems_before:
                return report  # an empty file (or blank lines): nothing in it, nothing wrong
            if fmt is None:
                bad = report.problem_count - problems_before
                raise NotASessionFile(
                    f"{name}: not a Codex, Claude Code or Gemini CLI session file "
                    f"(no record of theirs in its first {len(first)} record(s)"
                    + (f"; {bad} line(s) unreadable" if bad else "")
                    + ")"
                )
        tr: Translator = FORMATS[fmt](log=name, keep_args=keep_args)
        seen = 0
        for lineno, rec in [*first, *numbered]:
            seen += 1
            try:
                out = tr.feed(rec)
            except BadRecord as exc:
                report.problem(Problem(name, lineno, str(exc)))
                continue
            report.events += len(out)
            for ev in out:
                sink(ev)
        out = tr.flush()
        report.events += len(out)
        for ev in out:
            sink(ev)
        if tr.session is None and seen:
            raise NotASessionFile(f"{name}: no {fmt} session record (is it a {fmt} file?)")
    report.files += 1
    report.unknown.update(tr.unknown)
    return report


def _records(f: Any, name: str, report: Report) -> Iterator[tuple[int, Any]]:
    lines = LineReader()

    def parsed(numbered: Iterator[tuple[int, bytes | Oversized]]) -> Iterator[tuple[int, Any]]:
        for lineno, raw in numbered:
            try:
                rec = parse(raw)
            except ValueError as exc:
                report.problem(Problem(name, lineno, str(exc)))
                continue
            if rec is not None:
                report.records += 1
                yield lineno, rec

    while chunk := f.read(CHUNK):
        yield from parsed(lines.push(chunk))
    yield from parsed(lines.end())
