"""Following the agent CLIs' session files as they are written: new files found, growing files
read, each file's place kept so a restart resumes without reading anything twice.

Per file, a :class:`Checkpoint` holds which file it is (device, inode, first bytes), the offset
after its last whole line, and the adapter's state at that offset (the turn and the calls in
flight). It is handed to ``save`` behind the events it covers; ``load`` gives it back at start.

- A partial last line waits for the rest; an oversized line is skipped and reported.
- A file truncated or rewritten in place (its first bytes changed) is read again from its start;
  a file replaced under its name (rotation) is read as the new file it is. Either way the ledger
  keeps what was read before, and deduplication keeps a line read twice from counting twice.
- A file that vanishes is reported once and forgotten, its checkpoint with it (``forget``); at
  start, so are the checkpoints of files deleted under a root while nothing followed them
  (``saved`` lists them): the ledger keeps no place of a file that is gone.
- What only quiet can decide (a turn end an adapter holds: Gemini CLI's reply, written again
  with its tool calls if it has any) is decided once the file has been quiet for QUIET_S, by
  this run's looks or by its modification time; never because a run ends. A run stopped (a
  restart, ``watch --once``) keeps what is held in the file's checkpoint for the next one.
- A file quiet for IDLE_S is let go: its place is its checkpoint, and only its size and time
  are kept while it is listed; when it grows it is followed again from the checkpoint. What the
  follower holds is bounded by the files being written, not by a directory's years of history.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from turnwatch.integrations.agentlogs.base import BadRecord, Translator
from turnwatch.integrations.agentlogs.formats import FORMATS, session_files
from turnwatch.integrations.agentlogs.reader import Problem, Report, parse
from turnwatch.runtime.events import Event, storable_text
from turnwatch.runtime.lines import CHUNK, LineReader

#: How many first bytes identify a file's contents (a rewrite in place changes them).
HEAD_BYTES = 256
#: A quiet file's held turn end (Gemini's last reply) is decided after this long.
QUIET_S = 2.0
#: A file that has not grown for this long is let go (see the module's docstring).
IDLE_S = 300.0


@dataclass
class Checkpoint:
    """Where a followed file was read to, and the adapter's state there."""

    dev: int
    ino: int
    offset: int
    lineno: int
    head: str
    fmt: str
    state: dict[str, Any] = field(default_factory=dict)


#: What every checkpoint's key starts with.
KEY_PREFIX = "agents.offset:"


def key(path: Path) -> str:
    """The checkpoint's key in the ledger's metadata."""
    return f"{KEY_PREFIX}{path}"


class _File:
    def __init__(self, path: Path, tr: Translator, st: os.stat_result) -> None:
        self.path = path
        self.tr = tr  # the format is the root's: every followed file is of a known CLI
        self.dev, self.ino = st.st_dev, st.st_ino
        self.lines = LineReader()
        self.read_to = 0  # bytes read, including a partial line held in ``lines``
        self.head = b""
        self.grew_at = time.monotonic()
        self.flushed = True
        self.saved_at = 0.0
        self.saved_offset = -1  # what the last checkpoint said
        self.seen: tuple[int, int] = (-1, -1)  # (size, mtime) at the last look: unchanged, no read

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(
            self.dev,
            self.ino,
            self.lines.consumed,
            self.lines.lineno,
            self.head.hex(),
            self.tr.source,
            self.tr.snapshot(),
        )


class Follower:
    """Every session file under ``roots`` (``{format: directory}``), followed into ``sink``."""

    def __init__(
        self,
        roots: Mapping[str, Path],
        sink: Callable[[Event], None],
        *,
        load: Callable[[str], str | None] = lambda _k: None,
        save: Callable[[str, str], None] = lambda _k, _v: None,
        forget: Callable[[str], object] = lambda _k: None,
        saved: Callable[[], Iterable[str] | None] = lambda: (),
        on_problem: Callable[[Problem], None] = lambda _p: None,
        note: Callable[[str], None] = lambda _m: None,
        keep_args: bool = False,
        discover_s: float = 2.0,
    ) -> None:
        self.roots = dict(roots)
        self.sink = sink
        self.load, self.save, self.forget = load, save, forget
        # The keys of every checkpoint kept (as kept: see _sweep), or None while they cannot
        # be read; swept once, at the first listing.
        self.saved: Callable[[], Iterable[str] | None] | None = saved
        self.on_problem, self.note = on_problem, note
        self.keep_args = keep_args
        self.discover_s = discover_s
        self.report = Report()
        self.files: dict[Path, _File] = {}
        # Files reported vanished (not opened again while still listed), and files let go for
        # quiet: (size, mtime) when let go. Both only of files still listed.
        self._gone: set[Path] = set()
        self._quiet: dict[Path, tuple[int, int]] = {}
        self._discovered_at = -1e9

    # --- the loop's one step ---

    def poll(self, *, final: bool = False) -> int:
        """Find new files (every ``discover_s``), read what every file gained; return the
        number of events. ``final``: the end of the run (find files now, let none go)."""
        now = time.monotonic()
        if final or now - self._discovered_at >= self.discover_s:
            self._discover()
            self._discovered_at = now
        before = self.report.events
        for f in list(self.files.values()):
            self._step(f, now, final)
        return self.report.events - before

    def close(self) -> None:
        """Read what the files gained and save every file's place, with what it holds: a run's
        end decides nothing the file does not (the next run goes on from the checkpoint)."""
        self.poll(final=True)
        for f in self.files.values():
            self._save(f)
            self.report.unknown.update(f.tr.unknown)
        if self.report.unknown:  # counted, never fatal: a newer CLI writes record types we skip
            kinds = ", ".join(f"{k} ×{n}" for k, n in self.report.unknown.most_common(5))
            self.note(f"records of types turnwatch does not read: {kinds}")

    # --- internals ---

    def _discover(self) -> None:
        new = resumed = 0
        listed: set[Path] = set()
        for fmt, root in self.roots.items():
            if not root.exists():
                continue
            for path in session_files(root, fmt):
                listed.add(path)
                if path in self.files or path in self._gone:
                    continue
                quiet = self._quiet.get(path)
                if quiet is not None:
                    if not self._woke(path, quiet):
                        continue
                    del self._quiet[path]
                    self._open(path, fmt)  # from its checkpoint, as at a restart
                    continue
                new += 1
                resumed += self._open(path, fmt)
        self._gone &= listed
        for path in self._quiet.keys() - listed:
            del self._quiet[path]
            self.forget(key(path))
        if self.saved is not None:
            self._sweep(listed)
        if new:  # one line, not one per file: a CLI's directory holds thousands
            self.note(
                f"following {new} new session file(s), {resumed} resumed where the last run stopped"
            )

    def _open(self, path: Path, fmt: str) -> bool:
        """Start following ``path``; True when it resumes at a checkpoint."""
        try:
            st = path.stat()
        except FileNotFoundError:
            return False
        f = self.files[path] = _File(path, self._translator(fmt, path), st)
        self.report.files += 1
        raw = self.load(key(path))
        if raw is None:
            return False
        try:
            cp = Checkpoint(**orjson.loads(raw))
        except (ValueError, TypeError):  # not written by this version: start over, loudly
            self.note(f"{path}: its checkpoint is unreadable; reading it from its start")
            return False
        if (cp.dev, cp.ino) != (st.st_dev, st.st_ino) or st.st_size < cp.offset:
            self.note(f"{path}: not the file last read; reading it from its start")
            return False
        try:
            with open(path, "rb") as fh:
                head = fh.read(len(bytes.fromhex(cp.head)))
        except OSError:
            return False
        if head.hex() != cp.head:
            self.note(f"{path}: rewritten since last read; reading it from its start")
            return False
        f.lines = LineReader(offset=cp.offset, lineno=cp.lineno)
        f.read_to, f.head = cp.offset, head
        f.tr.restore(cp.state)
        f.flushed = False  # what the last run held is decided here, once the file is quiet
        return True

    def _sweep(self, listed: set[Path]) -> None:
        """Forget the checkpoints of files deleted under a root while nothing followed them.

        Only under a root that exists now (an unmounted home proves nothing gone), and only of
        files not listed now. Keys are compared as kept: a path not in UTF-8 is kept escaped
        (``storable_text``), and no escaped text names a file to look for."""
        assert self.saved is not None
        keys = self.saved()
        if keys is None:
            return  # the ledger cannot be read now: the next listing tries again
        self.saved = None
        under = tuple(
            storable_text(key(root)).rstrip(os.sep) + os.sep
            for root in self.roots.values()
            if root.is_dir()
        )
        live = {storable_text(key(p)) for p in listed}
        for k in keys:
            if k.startswith(under) and k not in live:
                self.forget(k)

    @staticmethod
    def _woke(path: Path, seen: tuple[int, int]) -> bool:
        try:
            st = path.stat()
        except FileNotFoundError:
            return False  # the next listing forgets it
        return (st.st_size, st.st_mtime_ns) != seen

    def _let_go(self, f: _File) -> None:
        """``f`` has been quiet for IDLE_S, its end decided and its place saved: keep only what
        tells that it grew."""
        self.report.unknown.update(f.tr.unknown)
        del self.files[f.path]
        self._quiet[f.path] = f.seen

    def _step(self, f: _File, now: float, final: bool) -> None:
        try:
            st = f.path.stat()
        except FileNotFoundError:
            self._lose(f, "vanished; what was read of it is kept")
            return
        changed = (st.st_size, st.st_mtime_ns) != f.seen
        if (st.st_dev, st.st_ino) != (f.dev, f.ino):
            self.note(f"{f.path}: replaced (rotated); reading the new file from its start")
            f = self._restart(f, st)
        elif changed and (st.st_size < f.read_to or not self._same_head(f)):
            self.note(f"{f.path}: truncated or rewritten; reading it again from its start")
            f = self._restart(f, st)
        f.seen = (st.st_size, st.st_mtime_ns)
        if st.st_size > f.read_to:
            self._read(f, st.st_size)
            f.grew_at, f.flushed = now, False
        # Quiet: as this run saw it, or as the file's time says (a file first looked at now
        # may have been quiet for hours). A run's end is no quiet: the CLI may be writing.
        wall = time.time()
        quiet = now - f.grew_at >= QUIET_S or wall - st.st_mtime >= QUIET_S
        if f.flushed and f.tr.calls:  # quiet, a call open: it may be waiting on its user
            self._emit(f.tr.ripen(wall))
        if not f.flushed and quiet:
            self._emit(f.tr.flush())
            f.flushed = True
            self._save(f)
        elif f.lines.consumed != f.saved_offset and now - f.saved_at >= QUIET_S:
            self._save(f)  # a long burst: a checkpoint at most every QUIET_S
        elif (
            not final
            and f.flushed
            and f.lines.consumed == f.saved_offset
            and now - f.grew_at >= IDLE_S
        ):
            self._let_go(f)

    def _same_head(self, f: _File) -> bool:
        if not f.head:
            return True
        try:
            with open(f.path, "rb") as fh:
                return fh.read(len(f.head)) == f.head
        except OSError:
            return True  # gone: the next look says so

    def _restart(self, f: _File, st: os.stat_result) -> _File:
        self._emit(f.tr.flush())
        fresh = self.files[f.path] = _File(f.path, self._translator(f.tr.source, f.path), st)
        return fresh

    def _translator(self, fmt: str, path: Path) -> Translator:
        return FORMATS[fmt](log=str(path), keep_args=self.keep_args)

    def _lose(self, f: _File, why: str) -> None:
        self._problem(Problem(str(f.path), 0, why))
        self._emit(f.tr.flush())
        self.files.pop(f.path, None)
        self._gone.add(f.path)
        self.forget(key(f.path))  # behind the last save, in the same queue

    def _read(self, f: _File, size: int) -> None:
        try:
            with open(f.path, "rb") as fh:
                if len(f.head) < HEAD_BYTES:
                    f.head = fh.read(HEAD_BYTES)
                fh.seek(f.read_to)
                while f.read_to < size:
                    chunk = fh.read(min(CHUNK, size - f.read_to))
                    if not chunk:
                        break
                    f.read_to += len(chunk)
                    self._lines(f, f.lines.push(chunk))
        except FileNotFoundError:
            self._lose(f, "vanished while being read; what was read of it is kept")

    def _lines(self, f: _File, numbered: Any) -> None:
        for lineno, raw in numbered:
            try:
                rec = parse(raw)
            except ValueError as exc:
                self._problem(Problem(str(f.path), lineno, str(exc)))
                continue
            if rec is None:
                continue
            self.report.records += 1
            try:
                self._emit(f.tr.feed(rec))
            except BadRecord as exc:
                self._problem(Problem(str(f.path), lineno, str(exc)))

    def _emit(self, events: list[Event]) -> None:
        for ev in events:
            self.sink(ev)
        self.report.events += len(events)

    def _problem(self, p: Problem) -> None:
        self.report.problem(p)
        self.on_problem(p)

    def _save(self, f: _File) -> None:
        self.save(key(f.path), orjson.dumps(asdict(f.checkpoint())).decode())
        f.saved_at, f.saved_offset = time.monotonic(), f.lines.consumed
