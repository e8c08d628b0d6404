"""File tools. Read, Glob and Grep are read-only: they open files for reading only, so a worker
the runtime raced away can run on but never write. Write and Edit replace files atomically and
are never abandoned once started.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import heapq
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from turnwatch.runtime.held_files import held, inodes
from turnwatch.runtime.model import TurnwatchError
from turnwatch.runtime.protocol import HostResult, HostStatus, Progress, Started
from turnwatch.runtime.tools.context import ToolContext, run_in_worker

#: Grep reads files in chunks of this size, so a huge file still checks for cancellation.
GREP_CHUNK = 4 * 1024 * 1024
#: A heartbeat at most this often while a worker has nothing else to say.
HEARTBEAT_S = 0.5
WRITE_CHUNK = 1024 * 1024
#: Read's ``limit`` when none is given, and the most it may be (bytes): a Read is raced and
#: discarded at a stop, and its worker runs on, so what it may hold is bounded up front.
READ_LIMIT = 1024 * 1024
READ_LIMIT_MAX = 64 * 1024 * 1024


class ToolArgumentError(TurnwatchError, ValueError):
    """A tool was called with arguments it cannot use; the message says which."""


def _arg(args: Any, name: str, kind: type, default: Any = ...) -> Any:
    if name not in args:
        if default is ...:
            raise ToolArgumentError(f"missing argument {name!r}")
        return default
    value = args[name]
    if not isinstance(value, kind):
        raise ToolArgumentError(f"argument {name!r} must be {kind.__name__}, got {value!r}")
    return value


def name_arg(args: Any, name: str, default: str | None = None) -> str:
    """A path or a command: a string with no NUL byte (no file or argv can hold one), else a
    :class:`ToolArgumentError` naming it."""
    value: str = _arg(args, name, str, ... if default is None else default)
    if "\0" in value:
        raise ToolArgumentError(
            f"argument {name!r} holds a NUL byte, which no path or command can: {value!r}"
        )
    return value


def count_arg(args: Any, name: str, default: int, most: int | None = None) -> int:
    """A count argument: an int from 1 (to ``most``), else a :class:`ToolArgumentError`
    that says the range."""
    value = args.get(name, default)
    # A bool is an int to Python, not to the agent that wrote ``true``.
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < 1
        or (most is not None and value > most)
    ):
        upto = f" to {most:,}" if most is not None else ""
        raise ToolArgumentError(f"argument {name!r} must be an int from 1{upto}, got {value!r}")
    return value


async def _race(ctx: ToolContext, work: asyncio.Future[HostResult]) -> HostResult:
    """A read-only call: the result, or, once the stop arrives, ABORTED at once (discarded)."""
    stop = asyncio.ensure_future(ctx.abort_arrived.wait())
    try:
        await asyncio.wait((work, stop), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if work.done() and not ctx.cancelled.is_set():
        return work.result()
    # The worker may run on; observe its end so its exception is never "never retrieved".
    work.add_done_callback(lambda f: f.cancelled() or f.exception())
    return HostResult(HostStatus.ABORTED, "", error="discarded at stop")


def _held(path: Path) -> HostResult | None:
    """An error for a file of the ledger this process writes: opened and closed here, it
    would lose the ledger's locks (see :mod:`turnwatch.runtime.held_files`)."""
    ledger = held(path)
    if ledger is None:
        return None
    why = (
        f"{path}: a file of this runtime's turnwatch ledger ({ledger}), which its own tools "
        "never open; look at it with turnwatch sessions"
    )
    return HostResult(HostStatus.ERROR, error=why)


def _started(ctx: ToolContext) -> None:
    ctx.notify(Started())


async def read(ctx: ToolContext) -> HostResult:
    """Read a file (any readable path, a FIFO included) as text."""
    path = Path(name_arg(ctx.args, "path"))
    limit = count_arg(ctx.args, "limit", READ_LIMIT, READ_LIMIT_MAX)
    _started(ctx)

    def work() -> HostResult:
        if refused := _held(path):
            return refused
        with path.open("rb") as fh:  # read-only, always
            data = fh.read(limit + 1)  # one byte more: whether the file goes on
        truncated = len(data) > limit
        # Cut by the limit, a character's first bytes are left out, not shown as U+FFFD.
        text = codecs.getincrementaldecoder("utf-8")("replace").decode(
            data[:limit], final=not truncated
        )
        if truncated:
            text += f"\n[… the file goes on past the {limit:,} bytes read (limit) …]\n"
        read = min(len(data), limit)
        return HostResult(HostStatus.OK, text, data={"truncated": truncated, "bytes": read})

    return await _race(ctx, run_in_worker(ctx, work, f"Read {ctx.request.call_id}"))


async def glob(ctx: ToolContext) -> HostResult:
    """Paths under ``path`` matching ``pattern`` (``**`` recurses), sorted: the first
    ``max_results`` (default 1000) of them, and ``data["truncated"]`` if there were more."""
    root = Path(name_arg(ctx.args, "path", "."))
    pattern = name_arg(ctx.args, "pattern")
    most = count_arg(ctx.args, "max_results", 1000)
    if os.path.isabs(pattern):  # a model's whole path (pathlib takes none): from its root
        anchor = Path(pattern).anchor
        root, pattern = Path(anchor), pattern[len(anchor) :]
    if not pattern:
        raise ToolArgumentError("argument 'pattern' is empty: it names nothing to match")
    _started(ctx)

    def matches() -> Iterator[str]:
        try:
            for p in root.glob(pattern):
                if ctx.cancelled.is_set():
                    return
                yield str(p)
        except ValueError as exc:  # pathlib reads the pattern as it starts: "a/**b"
            raise ToolArgumentError(f"argument 'pattern' {pattern!r}: {exc}") from None

    def work() -> HostResult:
        if not root.exists():  # nothing found, said so, would read as "no match"
            return HostResult(HostStatus.ERROR, error=f"{root} does not exist")
        # The first most + 1 in order, however many match: memory bounded by the count asked.
        found = heapq.nsmallest(most + 1, matches())
        if ctx.cancelled.is_set():
            return HostResult(HostStatus.ABORTED, "", error="cancelled")  # nobody reads it
        truncated = len(found) > most
        del found[most:]
        return HostResult(
            HostStatus.OK, "\n".join(found), data={"count": len(found), "truncated": truncated}
        )

    return await _race(ctx, run_in_worker(ctx, work, f"Glob {ctx.request.call_id}"))


async def grep(ctx: ToolContext) -> HostResult:
    """Lines matching a regular expression in the regular files under ``path``.

    Arguments: ``pattern``, ``path`` (default ``.``), ``ignore_case``, ``max_matches``. Matches
    stream as progress; a heartbeat reports the files scanned.
    """
    pattern = _arg(ctx.args, "pattern", str)
    root = name_arg(ctx.args, "path", ".")
    flags = re.IGNORECASE if _arg(ctx.args, "ignore_case", bool, False) else 0
    max_matches = count_arg(ctx.args, "max_matches", 1000)
    try:
        rx = re.compile(pattern.encode(), flags)
    except re.error as exc:
        raise ToolArgumentError(f"invalid pattern {pattern!r}: {exc}") from None
    _started(ctx)

    def work() -> HostResult:
        if not os.path.exists(root):  # it was "scanned", and nothing matched in it
            return HostResult(HostStatus.ERROR, error=f"{root} does not exist")
        if not os.path.isdir(root) and (refused := _held(Path(root))):
            return refused  # named explicitly (under a directory, it is passed by)
        matches: list[str] = []
        scanned = 0
        last_beat = time.monotonic()
        # One match more than asked for: whether there were more.
        for path in _regular_files(root, ctx.cancelled.is_set):
            _grep_file(path, rx, matches, max_matches + 1, ctx)
            scanned += 1
            if len(matches) > max_matches or ctx.cancelled.is_set():
                break
            now = time.monotonic()
            if now - last_beat >= HEARTBEAT_S:
                last_beat = now
                ctx.notify_threadsafe(Progress(progress=float(scanned)))
        if ctx.cancelled.is_set():
            # Raced away at the stop: nobody reads this result, so do not join up to
            # max_matches lines into one string for it.
            return HostResult(HostStatus.ABORTED, "", error="cancelled")
        truncated = len(matches) > max_matches
        del matches[max_matches:]
        return HostResult(
            HostStatus.OK,
            "\n".join(matches),
            data={"files": scanned, "matches": len(matches), "truncated": truncated},
        )

    return await _race(ctx, run_in_worker(ctx, work, f"Grep {ctx.request.call_id}"))


def _regular_files(root: str, stop: Callable[[], bool]) -> Iterator[str]:
    if not os.path.isdir(root):
        yield root  # named explicitly: read it whatever it is, as grep does (a FIFO blocks)
        return
    mine = inodes()  # this process's ledger files: passed by (_held)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if stop():
                return
            path = os.path.join(dirpath, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            # Like ripgrep: no FIFOs, sockets or devices.
            if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) not in mine:
                yield path


def _grep_file(
    path: str, rx: re.Pattern[bytes], out: list[str], cap: int, ctx: ToolContext
) -> None:
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below; read-only by construction
    except OSError:
        return
    with fh:
        lineno = 1
        carry = b""
        while not ctx.cancelled.is_set():
            chunk = fh.read(GREP_CHUNK)
            if not chunk:
                break
            buf = carry + chunk
            cut = buf.rfind(b"\n") + 1
            if cut == 0 and len(buf) < GREP_CHUNK * 2:
                carry = buf
                continue
            body, carry = (buf[:cut], buf[cut:]) if cut else (buf, b"")
            lineno = _grep_block(path, body, rx, out, cap, lineno, ctx)
            if len(out) >= cap:
                return
        if carry:
            _grep_block(path, carry, rx, out, cap, lineno, ctx)


def _grep_block(
    path: str,
    body: bytes,
    rx: re.Pattern[bytes],
    out: list[str],
    cap: int,
    lineno: int,
    ctx: ToolContext,
) -> int:
    pos = 0
    found: list[str] = []
    for m in rx.finditer(body):
        if m.start() < pos:
            continue  # another match on a line already reported
        lineno += body.count(b"\n", pos, m.start())
        start = body.rfind(b"\n", 0, m.start()) + 1
        end = body.find(b"\n", m.end())
        end = len(body) if end < 0 else end
        line = f"{path}:{lineno}:{body[start:end].decode('utf-8', 'replace')}"
        found.append(line)
        pos = end
        if len(out) + len(found) >= cap:
            break
    if found:
        out.extend(found)
        # One progress message per block, not per line: a busy Grep must not flood the loop.
        ctx.notify_threadsafe(Progress(text="\n".join(found) + "\n"))
    return lineno + body.count(b"\n", pos)


def atomic_write(path: Path, data: bytes, on_chunk: Callable[[int, int], None]) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync, then rename over ``path``.

    A reader sees the old file or the whole new one, never a part. The file keeps its mode and,
    where this process may, its owner (a new one gets the mode its umask gives, as any program
    would); through a symbolic link, the file it points to is replaced and the link stays.
    """
    real = Path(os.path.realpath(path))
    real.parent.mkdir(parents=True, exist_ok=True)
    try:
        was: os.stat_result | None = os.stat(real)
    except FileNotFoundError:
        was = None
    fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".tmp")
    try:
        if was is not None and (was.st_uid, was.st_gid) != (os.geteuid(), os.getegid()):
            with contextlib.suppress(PermissionError):  # only root may give it away
                os.fchown(fd, was.st_uid, was.st_gid)
        # mkstemp makes it 0600: renamed over, a script lost its x bit, a config its readers.
        # After the chown, which clears set-id bits.
        os.fchmod(fd, stat.S_IMODE(was.st_mode) if was is not None else 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            for off in range(0, len(data), WRITE_CHUNK):
                fh.write(data[off : off + WRITE_CHUNK])
                on_chunk(min(off + WRITE_CHUNK, len(data)), len(data))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, real)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """This process's umask, read without setting it (os.umask would, for every thread)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


async def _mutate(ctx: ToolContext, work: Callable[[], HostResult]) -> HostResult:
    """Run a mutating worker to its end: a cancel is noted, never acted on mid-write."""
    _started(ctx)
    return await run_in_worker(ctx, work, f"{ctx.request.tool} {ctx.request.call_id}")


def _chunk_progress(ctx: ToolContext) -> Callable[[int, int], None]:
    def report(done: int, total: int) -> None:
        # Mutating calls are awaited, so their heartbeat goes on after the cancel request.
        ctx.notify_threadsafe(Progress(progress=done, total=total), after_cancel=True)

    return report


async def write(ctx: ToolContext) -> HostResult:
    """Replace ``path`` with ``content`` atomically."""
    path = Path(name_arg(ctx.args, "path"))
    data = _arg(ctx.args, "content", str).encode()

    def work() -> HostResult:
        atomic_write(path, data, _chunk_progress(ctx))
        return HostResult(
            HostStatus.OK, f"wrote {len(data)} bytes to {path}", data={"bytes": len(data)}
        )

    return await _mutate(ctx, work)


async def edit(ctx: ToolContext) -> HostResult:
    """Replace ``old`` by ``new`` in ``path`` (exactly once unless ``replace_all``), atomically;
    every other byte of the file stays as it was, its line endings with it."""
    path = Path(name_arg(ctx.args, "path"))
    old = _arg(ctx.args, "old", str)
    if not old:
        raise ToolArgumentError(
            "argument 'old' is empty: there is nothing to find (Write replaces a whole file)"
        )
    new = _arg(ctx.args, "new", str)
    replace_all = _arg(ctx.args, "replace_all", bool, False)

    def work() -> HostResult:
        if refused := _held(path):
            return refused
        try:
            # Decoded as it is: read_text() would turn every "\r\n" into "\n", and the file
            # was written back so.
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            return HostResult(
                HostStatus.ERROR,
                error=f"{path} is not UTF-8 text (byte {exc.start} is not): Edit changes text",
            )
        find, put = old, new
        count = text.count(find)
        if count == 0 and "\r\n" in text and "\n" in old:
            # A model writes lines ending "\n"; this file ends them "\r\n": so do they here.
            find, put = _CRLF.sub("\r\n", old), _CRLF.sub("\r\n", new)
            count = text.count(find)
        if count == 0 or (count > 1 and not replace_all):
            return HostResult(HostStatus.ERROR, error=f"{old!r} occurs {count} times in {path}")
        atomic_write(path, text.replace(find, put).encode("utf-8"), _chunk_progress(ctx))
        return HostResult(HostStatus.OK, f"replaced {count} in {path}", data={"count": count})

    return await _mutate(ctx, work)


#: A line feed not already part of "\r\n".
_CRLF = re.compile(r"(?<!\r)\n")
