"""Shared fixtures: real processes are waited for, cleaned up at once, and checked gone."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import psutil
import pytest

from turnwatch.runtime import LocalHost, MemorySink, Runtime
from turnwatch.runtime.cgroup import CgroupRoot

#: Every test grace window is short; one test checks the default.
GRACE = 0.6

#: This test run's token, in the environment of every process the run starts (inherited): the
#: helpers that find a call's processes by its marker count this run's only. Another suite on
#: the same machine (a second checkout's ``make test``, a chaos run's marked canaries) was
#: counted as this one's leftovers, and failed tests that had left nothing.
RUN_TOKEN = "TURNWATCH_TEST_RUN"
os.environ.setdefault(RUN_TOKEN, uuid.uuid4().hex)
# pytest-xdist's workers inherit the controller's token: each worker's own, so a worker's
# helpers never count a process another worker's test started (a program inheriting a worker's
# environment keeps its token: it already ends with the worker's name).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER and not os.environ[RUN_TOKEN].endswith(f".{_WORKER}"):
    os.environ[RUN_TOKEN] = f"{os.environ[RUN_TOKEN]}.{_WORKER}"


def this_run(env: Mapping[str, str]) -> bool:
    """Whether a process's environment ``env`` says this test run started it."""
    return env.get(RUN_TOKEN) == os.environ[RUN_TOKEN]


def pytest_configure(config: pytest.Config) -> None:
    """A run started in the background of a non-interactive shell (``nohup make test &``, some
    CI runners) inherits SIGINT ignored, and so does every program the tests start: their
    Ctrl-C, the way the tests stop them as a person does, then did nothing, and they were
    killed after a wait (``demo --web`` leaving its restarted turn's processes behind,
    ``ingest --follow`` timing out). Ignoring is inherited across exec, a handler is not."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # A pytest-xdist worker starts with COLUMNS=80 and LINES=24 in its environment. The CLI's
    # rich consoles are made at import and a width found in the environment then is fixed for
    # good, so every in-process command rendered 80 wide whatever the test asked for. Without
    # them, as in a serial run, a console reads its width at each use.
    for var in ("COLUMNS", "LINES"):
        os.environ.pop(var, None)


@functools.cache
def _cgroups() -> bool:
    root = CgroupRoot.probe()
    if root is not None:
        root.close()
    return root is not None


def require_cgroups() -> None:
    """Skip without a writable cgroup2 hierarchy; where ``TURNWATCH_REQUIRE_CGROUP=1`` (CI, which
    runs as root), fail instead: the cgroup tests must run there."""
    if _cgroups():
        return
    if os.environ.get("TURNWATCH_REQUIRE_CGROUP") == "1":
        pytest.fail("TURNWATCH_REQUIRE_CGROUP=1 but no writable cgroup2 hierarchy here")
    pytest.skip("no writable cgroup2 hierarchy (run as root, or under a delegated cgroup)")


def turnwatch(
    *argv: str, timeout: float = 60, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed console script, run as a user runs it (stdin closed)."""
    exe = shutil.which("turnwatch", path=os.path.dirname(sys.executable))
    assert exe is not None, "the console script is installed beside this python"
    return subprocess.run(
        [exe, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=None if env is None else dict(env),
    )


def one_line_exit_2(result: subprocess.CompletedProcess[str], *expected: str) -> None:
    """Bad input's contract: exit 2, one ``error:`` line naming what and where, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for text in expected:
        assert text in lines[0], (text, lines[0])
    assert "Traceback" not in result.stderr


def free_port() -> int:
    """A port free now on 127.0.0.1 (for a server the test starts next)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def exchange(port: int, request: bytes, *, half_close: bool = False, timeout: float = 10) -> bytes:
    """Send ``request`` as it is to 127.0.0.1:``port`` and read the reply to its end (a
    request no HTTP client would send: half a body, a chunked one framed wrong). ``half_close``:
    say the request is all sent (a short body is then short, not late)."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(request)
        if half_close:
            conn.shutdown(socket.SHUT_WR)
        conn.settimeout(timeout)
        reply = b""
        while part := conn.recv(4096):
            reply += part
    return reply


def wait_until(cond: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``cond`` until true (processes have no event to wait on); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


async def until(cond: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    """Async :func:`wait_until`: lets the loop run while polling."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)


class FakeClock:
    """Monotonic seconds a test moves by hand (``clock.now += 600``), for what takes a clock:
    ten minutes of back-off or a tombstone's TTL without waiting them."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def worker_alive(call_id: str) -> bool:
    """Whether a host worker thread of ``call_id`` still runs (threads are named after calls)."""
    return any(t.name.endswith(f" {call_id}") and t.is_alive() for t in threading.enumerate())


def task_done(name: str) -> bool:
    """Whether no task named ``name`` is pending (a call's lifecycle task is ``call {id}``)."""
    return not any(t.get_name() == name and not t.done() for t in asyncio.all_tasks())


def started(p: psutil.Process) -> float:
    """When ``p`` started, in seconds since boot: what tells it from a later process with its
    pid. Not the wall start time, which a clock step (this VM forked, mid-run, once) moves
    between two looks at the same process, making every tracked process look gone."""
    try:
        return float(p.create_time(monotonic=True))  # type: ignore[call-arg]
    except TypeError:  # psutil before 7.1: the wall start time
        return float(p.create_time())


class Procs:
    """Processes a test knows about, as (pid, start since boot); all must be gone at the end."""

    def __init__(self) -> None:
        self.known: dict[int, float] = {}
        self.popens: list[subprocess.Popen[bytes]] = []

    def spawn(self, argv: list[str], **kw: object) -> psutil.Process:
        """Start a process we own; tracked, and waited for at teardown."""
        proc = subprocess.Popen(argv, **kw)  # type: ignore[call-overload]
        self.popens.append(proc)
        return self.track(proc.pid)

    def track(self, pid: int) -> psutil.Process:
        proc = psutil.Process(pid)
        self.known[pid] = started(proc)
        return proc

    def alive(self) -> list[int]:
        out = []
        for pid, ct in self.known.items():
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(pid)
                if started(p) == ct and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(pid)
        return out

    def kill_all(self) -> None:
        """Kill what is still alive, with its children, and reap what of it is ours once it
        has died: a zombie of this process left behind would be a later test's to explain."""
        doomed = dict(self.known)
        for pid in self.alive():
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(pid).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        doomed[child.pid] = started(child)
                        child.kill()
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for proc in self.popens:
            proc.wait()
        # A SIGKILL takes effect a moment later (longer on a loaded machine): wait for each to
        # die before reaping, not one look (WNOHANG) that may come too soon. A zombie whose
        # parent is dying becomes ours (this process is a subreaper): it gets half a second to.
        deadline = time.monotonic() + 10
        for pid, ct in doomed.items():
            foreign_until = time.monotonic() + 0.5
            while time.monotonic() < deadline:
                try:
                    p = psutil.Process(pid)
                    if started(p) != ct:
                        break  # gone, and the pid reused
                    if p.status() == psutil.STATUS_ZOMBIE:
                        if p.ppid() == os.getpid():
                            with contextlib.suppress(ChildProcessError, OSError):
                                os.waitpid(pid, os.WNOHANG)
                            break
                        if time.monotonic() > foreign_until:
                            break  # its parent's to reap
                except psutil.Error:
                    break
                time.sleep(0.01)


@pytest.fixture
def procs() -> Iterator[Procs]:
    """Track spawned processes; kill survivors at teardown (the test asserts gone itself)."""
    p = Procs()
    yield p
    p.kill_all()


@pytest.fixture(scope="session", autouse=True)
def _session_reaper() -> Iterator[None]:
    """At the end, no process started under the test run may survive (marked by the host)."""
    yield
    # A recorded tree the last test ended may leave an unrecorded `sleep 0.1` of its loop, which
    # re-parents to this (subreaper) process and ends on its own: wait for that, not longer.
    with contextlib.suppress(AssertionError):
        wait_until(lambda: not _marked_children(), 2.0, "short-lived tool processes to end")
    leftovers = _marked_children()
    for child in leftovers:
        with contextlib.suppress(psutil.Error):
            child.kill()
    assert not leftovers, f"tool processes survived the test run: {leftovers}"


def _marked_children() -> list[psutil.Process]:
    """Live descendants of the test run that a host marked as a call's (zombies are dead)."""
    out = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "TURNWATCH_CALL" in child.environ() and child.status() != psutil.STATUS_ZOMBIE:
                out.append(child)
    return out


@pytest.fixture
def sink() -> MemorySink:
    return MemorySink()


@pytest.fixture
async def runtime(sink: MemorySink) -> Runtime:
    return Runtime(LocalHost(), grace_s=GRACE, sink=sink)


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    """A named pipe: a read-only worker opening it blocks, like a hung mount, until released."""
    path = tmp_path / "hung.fifo"
    os.mkfifo(path)
    yield path
    release_fifo(path)


def release_fifo(path: Path, data: bytes = b"late line\n") -> bool:
    """Let a worker blocked on ``path`` finish; False if no reader had it open yet (then a
    non-blocking open for writing fails, and a reader that opens it later still blocks)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return False
    with contextlib.suppress(OSError):
        os.write(fd, data)
    os.close(fd)
    return True


async def release_when_read(path: Path) -> None:
    """Release ``path`` once its worker has it open: a worker thread that has not reached its
    open() yet (a busy machine) would miss a release sent now and block for good."""
    await until(lambda: release_fifo(path), what=f"a reader to open {path.name}")
