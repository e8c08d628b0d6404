"""Process-backed tools: Bash and GenerateImages, each in its own process group.

On ``tools.abort``: SIGTERM to the group and to a snapshot of the tree; output is collected until
the process ends or the window ends, a hard cap that output never extends; then SIGKILL for
everything left. The pipe drain is capped too, so a grandchild holding the pipe open cannot hold
the settlement. The process is watched through a pidfd, so its group id stays ours (the zombie is
not reaped) until the last group signal went out.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from turnwatch import names
from turnwatch.runtime import procfs
from turnwatch.runtime.protocol import HostResult, HostStatus, Progress, Started
from turnwatch.runtime.tools import proctree
from turnwatch.runtime.tools.context import ToolContext
from turnwatch.runtime.tools.files import ToolArgumentError

#: After the process ended, how long readers may drain pipes a grandchild may still hold.
DRAIN_CAP_S = 0.25
#: The host answers this much before the runtime's grace window ends, so its answer lands in it.
ANSWER_MARGIN_S = 0.25
#: How long after SIGKILL we wait to see every member gone.
KILL_WAIT_S = 1.0


class _Pipes:
    """Non-blocking readers for stdout and stderr, feeding one output in arrival order."""

    def __init__(self, ctx: ToolContext, proc: subprocess.Popen[bytes]) -> None:
        self.ctx = ctx
        self.chunks: list[str] = []
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
            self.open -= 1
            if self.open == 0:
                self.eof.set()
            return
        text = data.decode("utf-8", "replace")
        self.chunks.append(text)
        if not self.ctx.cancelled.is_set():
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
        return "".join(self.chunks)


async def run_process(
    ctx: ToolContext,
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
) -> HostResult:
    """Run ``argv`` as a process tool, honouring ``tools.abort`` with the grace window."""
    marker = f"{ctx.request.session}/{ctx.request.call_id}"
    full_env = {**os.environ, **(env or {}), proctree.CALL_MARKER: marker}
    proc = subprocess.Popen(  # noqa: ASYNC220 - fork+exec is brief; the wait below is async
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=full_env,
        start_new_session=True,
    )
    proctree.SPAWNED.add(proc.pid)
    pidfd = os.pidfd_open(proc.pid)
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
    try:
        # The start time the watchdog will compare against, read the way it reads it.
        seen = procfs.read(proc.pid)
        ctx.notify(Started(pid=proc.pid, create_time=seen.create_time if seen else None))
        stop = asyncio.ensure_future(ctx.abort_arrived.wait())
        try:
            await asyncio.wait((stop, exited), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not exited.done() and ctx.abort is not None:
            return await _terminate(ctx, proc, exited, pipes, marker)
        await pipes.drain(DRAIN_CAP_S)
        code = proc.wait()
        status = HostStatus.OK if code == 0 else HostStatus.ERROR
        return HostResult(
            status,
            pipes.text,
            data={"exit_code": code, "exit_mono_ns": exited.result() if exited.done() else None},
            error=None if code == 0 else f"exit code {code}",
        )
    finally:
        ctx.loop.remove_reader(pidfd)
        os.close(pidfd)
        pipes.close()
        if proc.returncode is None:
            proc.kill()  # only reached if we were cancelled ourselves; the group is still ours
            proc.wait()
        proctree.SPAWNED.discard(proc.pid)


async def _terminate(
    ctx: ToolContext,
    proc: subprocess.Popen[bytes],
    exited: asyncio.Future[int],
    pipes: _Pipes,
    marker: str,
) -> HostResult:
    assert ctx.abort is not None
    started = time.monotonic()
    window = max(ctx.abort.grace_s - ANSWER_MARGIN_S, ctx.abort.grace_s / 2)
    deadline = started + window
    # The group first: one syscall. Then the tree, from the kernel's children lists (O(tree)),
    # or, where there are none, from one /proc scan shared by every stop under way.
    proctree.signal_group(proc.pid, signal.SIGTERM)
    found = await proctree.snapshot(proc.pid, marker)
    proctree.signal_members({p: c for p, c in found.items() if p != proc.pid}, signal.SIGTERM)
    await asyncio.wait((exited,), timeout=max(deadline - time.monotonic(), 0))
    ended_on_term = exited.done()
    # Whatever is left now is killed: the group (its leader is unreaped, so the pgid is still
    # ours) and every member of the tree; past the window, a fresh scan finds late forks too.
    proctree.signal_group(proc.pid, signal.SIGKILL)
    if not ended_on_term:
        found.update(await proctree.snapshot(proc.pid, marker))
    found.pop(proc.pid, None)
    left = proctree.alive(found)
    proctree.signal_members(left, signal.SIGKILL)
    await pipes.drain(min(DRAIN_CAP_S, max(deadline - time.monotonic(), 0.01)))
    code = proc.wait()
    kill_deadline = time.monotonic() + KILL_WAIT_S
    while left and time.monotonic() < kill_deadline:
        await asyncio.sleep(0.01)  # polling: a process that is not our child has no exit event
        left = proctree.alive(left)
        proctree.signal_members(left, signal.SIGKILL)
    return HostResult(
        HostStatus.ABORTED,
        pipes.text,
        error=names.TOOL_ABORTED,
        data={
            "exit_code": code,
            "terminated_by": "SIGTERM" if ended_on_term else "SIGKILL",
            "survivors": sorted(left),
            "stop_to_exit_s": time.monotonic() - started,
            "exit_mono_ns": exited.result() if exited.done() else None,
        },
    )


async def bash(ctx: ToolContext) -> HostResult:
    """``bash -c command``, stdout and stderr captured; ``cwd`` optional."""
    command = ctx.args.get("command")
    if not isinstance(command, str):
        raise ToolArgumentError(f"argument 'command' must be str, got {command!r}")
    cwd = ctx.args.get("cwd")
    return await run_process(
        ctx, ["bash", "-c", command], cwd=cwd if isinstance(cwd, str) else None
    )


async def generate_images(ctx: ToolContext) -> HostResult:
    """Render a real PNG in a subprocess: ``prompt``, ``out`` (path), ``size``, ``steps``."""
    out = ctx.args.get("out")
    if not isinstance(out, str):
        raise ToolArgumentError(f"argument 'out' must be str (a .png path), got {out!r}")
    size = int(ctx.args.get("size", 64))
    steps = int(ctx.args.get("steps", 1))
    prompt = str(ctx.args.get("prompt", ""))
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
