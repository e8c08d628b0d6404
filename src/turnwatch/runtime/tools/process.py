"""Process-backed tools: Bash and GenerateImages, each in a cgroup or a process group of its own.

On ``tools.abort``: SIGTERM to every process of the call (its cgroup's members; or its group, its
tree and the orphans adopted with its marker), output collected until all are gone or the window
ends, a hard cap that output never extends; then ``cgroup.kill`` or SIGKILL for everything left
(:mod:`turnwatch.runtime.tools.containment`, :func:`turnwatch.runtime.terminate.terminate`). The
pipe drain is capped, so a child holding the pipe open cannot hold the settlement. The
first process is watched through a pidfd, so its group id stays ours (the zombie is not reaped)
until the last group signal went out.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from turnwatch import names
from turnwatch.runtime import procfs, terminate
from turnwatch.runtime.cgroup import ENTER_FAILED, CallCgroup
from turnwatch.runtime.clock import REAL
from turnwatch.runtime.protocol import HostResult, HostStatus, Progress, Started
from turnwatch.runtime.tools import proctree
from turnwatch.runtime.tools.containment import Containers
from turnwatch.runtime.tools.context import ToolContext
from turnwatch.runtime.tools.files import ToolArgumentError, count_arg, name_arg
from turnwatch.runtime.tools.output import Output

#: After the process ended, how long readers may drain pipes a grandchild may still hold.
DRAIN_CAP_S = 0.25
#: The host answers this much before the runtime's grace window ends, so its answer lands in it
#: (SIGKILL, the group gone, the pipes drained: on a loaded two-core machine, 0.25 s was not
#: always enough).
ANSWER_MARGIN_S = 0.35
#: GenerateImages' largest ``size`` (pixels a side) and ``steps``: the renderer holds the whole
#: image in memory (100,000 a side was ten gigapixels).
IMAGE_SIZE_MAX = 4096
IMAGE_STEPS_MAX = 100_000


def kill_after(grace_s: float, left_s: float | None = None) -> float:
    """How long after SIGTERM the host sends SIGKILL: what is left of the runtime's window (it
    began when tools.abort was sent; ``left_s`` None: all of it), less the margin the answer needs
    to land inside it, and never less than half of what is left."""
    left = grace_s if left_s is None else min(max(left_s, 0.0), grace_s)
    return max(left - ANSWER_MARGIN_S, left / 2)


@functools.cache
def _fallback() -> Containers:
    """A tool run outside a host (tests, embedding): process-group containment, no subreaper."""
    return Containers(None, subreaper=False)


class _Pipes:
    """Non-blocking readers for stdout and stderr, feeding one output in arrival order (each
    stream decoded on its own, the whole bounded: :mod:`~turnwatch.runtime.tools.output`)."""

    def __init__(self, ctx: ToolContext, proc: subprocess.Popen[bytes]) -> None:
        self.ctx = ctx
        self.output = Output()
        self.open = 0
        self.eof = asyncio.Event()
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            fd = stream.fileno()
            os.set_blocking(fd, False)
            ctx.loop.add_reader(fd, self._readable, fd)
            self.open += 1
        self._streams = (proc.stdout, proc.stderr)

    def _readable(self, fd: int) -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.ctx.loop.remove_reader(fd)
            self.output.feed(fd, b"", final=True)  # a character the stream left cut short
            self.open -= 1
            if self.open == 0:
                self.eof.set()
            return
        text = self.output.feed(fd, data)
        if text and not self.ctx.cancelled.is_set():
            self.ctx.notify(Progress(text=text))

    async def drain(self, cap: float) -> bool:
        """Wait for EOF at most ``cap`` seconds; True if both pipes closed."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.eof.wait(), timeout=max(cap, 0.0))
        return self.eof.is_set()

    def close(self) -> None:
        for stream in self._streams:
            assert stream is not None
            with contextlib.suppress(ValueError, OSError):
                self.ctx.loop.remove_reader(stream.fileno())
            stream.close()

    @property
    def text(self) -> str:
        return self.output.text


async def run_process(
    ctx: ToolContext,
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
) -> HostResult:
    """Run ``argv`` as a process tool, honouring ``tools.abort`` with the grace window.

    A command asked for after the call's ``tools.abort`` is never spawned (the result is
    ``ABORTED``). A stop that arrives before the call's result is returned ends every process of
    the call, including after its first process exited while a child still holds the output
    pipe. A call that ends normally while processes it started live on hands them to the host as
    lingering: the result lists them, and the turn's stop ends them.
    """
    if ctx.abort is not None:
        # Stopped before this command: a stopped call starts nothing. The look and the spawn
        # below (with its registration for containment) are one step: nothing awaits between.
        return HostResult(HostStatus.ABORTED, error=names.TOOL_ABORTED, data={"spawned": False})
    box = ctx.containers or _fallback()
    marker = f"{ctx.request.session}/{ctx.request.call_id}"
    cgroup = box.new_cgroup()
    proc, pidfd = _spawn(
        argv if cgroup is None else cgroup.wrap(argv),
        cwd=cwd,
        env={**os.environ, **(env or {}), proctree.CALL_MARKER: marker},
        cgroup=cgroup,
    )
    if isinstance(pidfd, OSError):
        return await _unheld(proc, pidfd, marker, cgroup, box)
    # Resolves with the moment the process exited (monotonic ns): one fact, one future.
    exited: asyncio.Future[int] = ctx.loop.create_future()

    def on_exit() -> None:
        # A pidfd stays readable once the process exits: remove the reader at once, or the
        # loop would call this on every iteration (a busy spin) until the finally below.
        ctx.loop.remove_reader(pidfd)
        if not exited.done():
            exited.set_result(time.monotonic_ns())

    ctx.loop.add_reader(pidfd, on_exit)
    pipes = _Pipes(ctx, proc)
    lingering = False
    try:
        # The start time the watchdog will compare against, read the way it reads it.
        seen = procfs.read(proc.pid)
        ctx.notify(
            Started(
                pid=proc.pid,
                create_time=seen.create_time if seen else None,
                start_ticks=seen.ticks if seen else None,
                boot_id=procfs.boot_id(),
                containment=box.kind(cgroup).value,
                cgroup=str(cgroup.path) if cgroup is not None else None,
                cgroup_id=cgroup.ino if cgroup is not None else None,
                holes=box.holes(cgroup),
            )
        )
        if await _stopped_before(ctx, exited):
            return await _terminate(ctx, proc, exited, pipes, box, marker, cgroup)
        # The first process ended. Drain what a child may still write, unless a stop comes
        # first. Either way, from here to the return nothing awaits, so no stop slips between
        # the look at what is left and handing it over as lingering.
        drain = asyncio.ensure_future(pipes.drain(DRAIN_CAP_S))
        if await _stopped_before(ctx, drain):
            drain.cancel()
        # Read before the first process is reaped: its group id is ours while it is a zombie.
        left = box.leftovers(proc.pid, marker, cgroup)
        if ctx.abort is not None and (left is not None or not pipes.eof.is_set()):
            # The drained-pipe case: stopped before its release while processes of it live on.
            if left is not None:
                left.close()
            return await _terminate(ctx, proc, exited, pipes, box, marker, cgroup)
        code = proc.wait()
        data: dict[str, Any] = {"exit_code": code, "exit_mono_ns": exited.result()}
        if left is not None:
            data["lingering"] = _lingering(left.members())
            box.linger(ctx.request, left, cgroup)
            lingering = True
        return _exited(code, pipes.text, data, cgroup)
    finally:
        ctx.loop.remove_reader(pidfd)
        os.close(pidfd)
        pipes.close()
        if proc.returncode is None:
            # Only reached if we were cancelled ourselves: the event loop ending with the call in
            # flight (an application shutting down). Nothing of the call may outlive it.
            _kill_all(proc, marker, cgroup)
            proc.wait()
        proctree.SPAWNED.discard(proc.pid)
        if cgroup is not None and not lingering:
            cgroup.remove()
        box.after_call()


def _kill_all(proc: subprocess.Popen[bytes], marker: str, cgroup: CallCgroup | None) -> None:
    """SIGKILL everything of a call at once, no grace window: whoever cancelled the call is not
    waiting for one (a runtime that is to stop its calls gracefully stops its sessions first).
    The first process is not reaped yet, so its group id is still the call's."""
    if cgroup is not None:
        cgroup.kill()
    else:
        held = terminate.Pidfds(proctree.tree(proc.pid, marker))  # escapees with the marker too
        held.kill()
        held.close()
    proctree.signal_group(proc.pid, signal.SIGKILL)


def _exited(code: int, text: str, data: dict[str, Any], cgroup: CallCgroup | None) -> HostResult:
    """The result of a call whose first process exited with ``code``."""
    if code == ENTER_FAILED and cgroup is not None and "cgroup.procs" in text:
        # The shell's own complaint about the move (a script may exit 125 by itself).
        return HostResult(
            HostStatus.ERROR, text, data=data, error="could not enter the call's cgroup"
        )
    return HostResult(
        HostStatus.OK if code == 0 else HostStatus.ERROR,
        text,
        data=data,
        error=None if code == 0 else f"exit code {code}",
    )


def _spawn(
    argv: Sequence[str], *, cwd: str | None, env: Mapping[str, str], cgroup: CallCgroup | None
) -> tuple[subprocess.Popen[bytes], int | OSError]:
    """The call's first process, and the pidfd that holds it (or why none could be had).

    A spawn that fails (a cwd that does not exist, a program that is not there) ran nothing:
    the cgroup made for it goes, or it would stay, empty, for the life of the host.
    """
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,  # a group of its own in both modes: one signal reaches it
        )
    except BaseException:
        if cgroup is not None:
            cgroup.remove()
        raise
    proctree.SPAWNED.add(proc.pid)
    try:
        return proc, os.pidfd_open(proc.pid)
    except OSError as exc:
        return proc, exc


async def _unheld(
    proc: subprocess.Popen[bytes],
    exc: OSError,
    marker: str,
    cgroup: CallCgroup | None,
    box: Containers,
) -> HostResult:
    """A process that cannot be held (no ``pidfd_open``: a kernel before 5.3, a seccomp filter
    that refuses it, no file descriptor left) is killed at once: no stop could reach it, and no
    result would say it runs. Its group is still ours (we have not reaped it), and with a
    cgroup all of it is inside."""
    _kill_all(proc, marker, cgroup)
    if cgroup is not None:
        with contextlib.suppress(OSError):  # out of descriptors too: removed below if it can be
            await cgroup.wait_empty(terminate.KILL_WAIT_S)
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    proctree.SPAWNED.discard(proc.pid)
    if cgroup is not None:
        cgroup.remove()
    box.after_call()
    # Refused outright (no such call, or a seccomp filter): what the machine lacks, said.
    needs = (
        ": process tools need Linux 5.3 or later, with pidfd_open allowed"
        if exc.errno in (errno.ENOSYS, errno.EPERM)
        else ""
    )
    return HostResult(
        HostStatus.ERROR,
        error=f"could not hold the call's process (pidfd_open: {exc.strerror}), so it was "
        f"killed{needs}",
    )


async def _stopped_before(ctx: ToolContext, fut: asyncio.Future[Any]) -> bool:
    """Wait for ``fut`` or a stop; True if a stop arrived while ``fut`` was still pending."""
    if not fut.done() and not ctx.abort_arrived.is_set():
        stop = asyncio.ensure_future(ctx.abort_arrived.wait())
        try:
            await asyncio.wait((stop, fut), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
    return ctx.abort is not None and not fut.done()


async def _terminate(
    ctx: ToolContext,
    proc: subprocess.Popen[bytes],
    exited: asyncio.Future[int],
    pipes: _Pipes,
    box: Containers,
    marker: str,
    cgroup: CallCgroup | None,
) -> HostResult:
    assert ctx.abort is not None
    clock = ctx.clock
    started = clock.monotonic()
    deadline = ctx.abort.deadline if clock is REAL else None
    left = deadline - time.monotonic() if deadline is not None else None
    window = kill_after(ctx.abort.grace_s, left)
    target = await box.target(proc.pid, marker, cgroup)
    try:
        ended = await terminate.terminate(target, window, clock=clock)
    finally:
        target.close()
    await pipes.drain(min(DRAIN_CAP_S, max(started + window - clock.monotonic(), 0.01)))
    code = proc.wait()
    return HostResult(
        HostStatus.ABORTED,
        pipes.text,
        error=names.TOOL_ABORTED,
        data={
            "exit_code": code,
            "terminated_by": ended.by,
            "survivors": ended.alive,
            "stop_to_exit_s": clock.monotonic() - started,
            "exit_mono_ns": exited.result() if exited.done() else None,
        },
    )


async def bash(ctx: ToolContext) -> HostResult:
    """``bash -c command``, stdout and stderr captured; ``cwd`` optional."""
    command = name_arg(ctx.args, "command")
    # A cwd given is used or refused, never passed over: the command would run elsewhere.
    cwd = name_arg(ctx.args, "cwd") if ctx.args.get("cwd") is not None else None
    return await run_process(ctx, ["bash", "-c", command], cwd=cwd)


async def generate_images(ctx: ToolContext) -> HostResult:
    """Render a real PNG in a subprocess: ``prompt``, ``out`` (path), ``size``, ``steps``."""
    out = name_arg(ctx.args, "out")
    size = count_arg(ctx.args, "size", 64, IMAGE_SIZE_MAX)
    steps = count_arg(ctx.args, "steps", 1, IMAGE_STEPS_MAX)
    prompt = ctx.args.get("prompt", "")
    if not isinstance(prompt, str):
        raise ToolArgumentError(f"argument 'prompt' must be str, got {prompt!r}")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "turnwatch.runtime.tools.render",
        out,
        str(size),
        str(steps),
        prompt,
    ]
    return await run_process(ctx, argv)


def _lingering(members: dict[int, float]) -> list[list[float]]:
    """``[[pid, start time, start ticks], ...]``: with its ticks (of the call's boot, recorded
    at its start), a process is still proved the same after a clock step."""
    out: list[list[float]] = []
    for pid, ct in sorted(members.items()):
        seen = procfs.read(pid)
        if seen is not None and seen.ticks is not None and procfs.same_start(seen.create_time, ct):
            out.append([pid, ct, seen.ticks])
        else:
            out.append([pid, ct])
    return out
