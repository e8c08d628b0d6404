"""Attributing the agent CLIs' processes, with real processes: the CLI found by its command line
and project, its shells recorded with their start times, and nothing else ever recorded."""

from __future__ import annotations

import hashlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import Procs, turnwatch, wait_until
from tests.watchdog.helpers import Recorder, step_clock
from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.tracing.ledger import connect
from turnwatch.watchdog.agentmatch import is_cli, is_shell_command
from turnwatch.watchdog.agentprocs import CONFIRM_S, Attributor

FAKE = Path(__file__).with_name("fake_cli.py")


class Cli:
    """A fake Claude Code process in ``project``; SIGUSR1 makes it start a shell."""

    def __init__(self, tmp: Path, project: Path, procs: Procs) -> None:
        exe = tmp / "bin" / "claude"
        exe.parent.mkdir(exist_ok=True)
        shutil.copy(FAKE, exe)
        self.project = project
        self.proc = procs.spawn(
            [sys.executable, str(exe), str(project)],
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        self.procs = procs
        popen = procs.popens[-1]
        assert popen.stdout is not None
        assert popen.stdout.readline() == b"ready\n"  # in its project, its handlers set
        popen.stdout.close()

    def shell(self) -> psutil.Process:
        """Have the CLI start ``bash -c 'sleep 1000'``; the shell, tracked."""
        known = self._children()
        self.proc.send_signal(signal.SIGUSR1)
        wait_until(lambda: len(self._children()) > len(known), what="the shell")
        return self.procs.track(self._children()[-1])

    def _children(self) -> list[int]:
        path = self.project / "children.txt"
        return [int(x) for x in path.read_text().split()] if path.exists() else []


@pytest.fixture
def project(tmp_path: Path) -> Path:
    p = tmp_path / "project"
    p.mkdir()
    return p


def session(rec: Recorder, project: Path, sid: str = "cc-1", *, ago: float = 5.0) -> None:
    """What the follower records of a Claude Code session with an open turn."""
    attrs = {
        names.K_SOURCE: "claude-code",
        names.K_PROJECT: hashlib.sha256(str(project).encode()).hexdigest(),
    }
    rec(names.RUNTIME_STARTED, sid, ago, attrs=attrs)
    rec(names.TURN_STARTED, sid, ago, turn=f"{sid}.t1")
    rec.ledger.flush()


class Harness:
    def __init__(self, ledger: Path) -> None:
        self.rec = Recorder(ledger)
        self.events: list[Event] = []
        self.said: list[str] = []
        self.path = ledger

        def sink(ev: Event) -> None:
            self.events.append(ev)
            self.rec.ledger.append(ev)

        self.sink = sink
        self.attr = Attributor(sink, say=self.said.append)

    def restart(self) -> None:
        """A new watchdog over the same ledger: what it knows, it reads there."""
        self.attr = Attributor(self.sink, say=self.said.append)

    def step(self, now: float | None = None) -> int:
        self.rec.ledger.flush()
        conn = connect(self.path, readonly=True)
        try:
            return self.attr.step(conn, now=now)
        finally:
            conn.close()
            self.rec.ledger.flush()

    def settle(self) -> None:
        """Two looks, the confirmation delay apart: a shell seen twice is recorded."""
        now = time.time()
        self.step(now)
        self.step(now + 2 * CONFIRM_S)  # on the attributor's clock, not by sleeping

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path / "ledger.sqlite3")
    yield h
    h.rec.close()


def test_the_cli_and_its_shell_are_recorded_and_nothing_else(
    tmp_path: Path, project: Path, procs: Procs, harness: Harness
) -> None:
    cli = Cli(tmp_path, project, procs)
    decoy = procs.spawn(["/bin/bash", "-c", "sleep 1000"], cwd=project, start_new_session=True)
    session(harness.rec, project, ago=0.0)  # the turn starts after the CLI did
    harness.step()
    started = [e for e in harness.events if e.kind == names.RUNTIME_STARTED]
    assert [(e.attrs[names.K_PID], e.session) for e in started] == [(cli.proc.pid, "cc-1")]
    shell = cli.shell()
    harness.settle()
    recorded = [e for e in harness.events if e.kind == names.TOOL_STARTED]
    assert [(e.attrs[names.K_PID], e.tool, e.attrs[names.K_CLASS]) for e in recorded] == [
        (shell.pid, "Bash", "process")
    ]
    assert recorded[0].attrs[names.K_CREATE_TIME] == shell.create_time()
    assert decoy.pid not in {e.attrs.get(names.K_PID) for e in harness.events}
    harness.settle()  # looking again records nothing twice
    assert harness.kinds().count(names.TOOL_STARTED) == 1


def test_a_watchdog_started_after_a_clock_step_records_nothing_twice(
    tmp_path: Path,
    project: Path,
    procs: Procs,
    harness: Harness,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A watchdog recorded a CLI and its shell; the wall clock stepped; a new watchdog reads the
    same ledger. The CLI is the one recorded (not a new CLI of the session) and the shell is
    the one recorded (not a second call), though every start time it computes moved 2 s."""
    cli = Cli(tmp_path, project, procs)
    session(harness.rec, project, ago=0.0)
    harness.step()
    shell = cli.shell()
    harness.settle()
    assert harness.kinds().count(names.TOOL_STARTED) == 1
    recorded = len(harness.events)

    step_clock(monkeypatch)
    harness.restart()
    harness.settle()

    assert harness.events[recorded:] == []
    assert shell.is_running()


def test_after_the_wall_clock_stepped_back_a_shell_from_before_the_turn_is_not_its(
    tmp_path: Path,
    project: Path,
    procs: Procs,
    harness: Harness,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A watchdog reads ``btime`` once; the wall clock then stepped back 30 s. Its start times
    are 30 s ahead of the CLIs' logs from then on: a shell the CLI started before the turn fell
    inside the turn's window, was recorded as its call, and would have been ended with it. The
    turn's own shell is still recorded."""
    cli = Cli(tmp_path, project, procs)
    before = cli.shell()  # not of the turn: the CLI started it before the turn began
    time.sleep(1.5)  # more than the windows' slack
    session(harness.rec, project, ago=0.0)
    harness.step()  # the CLI is found, on the clock before the step
    step_clock(monkeypatch, by=30.0)
    own = cli.shell()
    now = time.time() + 30.0  # the turn has run 30 s
    harness.step(now)
    harness.step(now + 2 * CONFIRM_S)
    recorded = [e.attrs[names.K_PID] for e in harness.events if e.kind == names.TOOL_STARTED]
    assert recorded == [own.pid]
    assert before.pid not in recorded


def test_an_interrupted_turn_s_shell_is_ended_and_never_the_cli(
    tmp_path: Path, project: Path, procs: Procs, harness: Harness
) -> None:
    cli = Cli(tmp_path, project, procs)
    decoy = procs.spawn(["/bin/bash", "-c", "sleep 1000"], cwd=project, start_new_session=True)
    session(harness.rec, project, ago=0.0)
    harness.step()
    shell = cli.shell()
    harness.settle()
    # Esc: the log says the turn was interrupted; the CLI lives on, so does its shell.
    harness.rec(names.STOP_CLICKED, "cc-1", 10, turn="cc-1.t1", attrs={"source": "claude-code"})
    harness.rec(names.TURN_SETTLED, "cc-1", 10, turn="cc-1.t1", attrs={"outcome": "aborted"})
    harness.rec(names.PROCESSING_CLEARED, "cc-1", 10, turn="cc-1.t1")
    harness.rec.ledger.flush()
    dry = turnwatch("watch", "--once", "--json", "--grace", "1", "--ledger", str(harness.path))
    assert dry.returncode == 1
    assert f'"kind": "{names.F_ORPHAN_TOOL_PROCESS}"' in dry.stdout
    assert shell.is_running()  # looking never kills
    plan = turnwatch("recover", "cc-1", "--dry-run", "--grace", "1", "--ledger", str(harness.path))
    assert f"{names.F_ORPHAN_TOOL_PROCESS}: would terminate" in plan.stdout
    assert shell.is_running()
    done = turnwatch("recover", "cc-1", "--yes", "--grace", "1", "--ledger", str(harness.path))
    assert done.returncode == 0, done.stdout + done.stderr
    wait_until(lambda: not shell.is_running() or shell.status() == psutil.STATUS_ZOMBIE)
    assert cli.proc.is_running()  # the CLI itself is never touched
    assert decoy.is_running()


def test_a_cli_gone_leaves_an_orphan_the_watchdog_ends_by_pid_and_start_time(
    tmp_path: Path, project: Path, procs: Procs, harness: Harness
) -> None:
    cli = Cli(tmp_path, project, procs)
    session(harness.rec, project, ago=0.0)
    harness.step()
    shell = cli.shell()
    harness.settle()
    cli.proc.terminate()  # exits without ending its shell, which init adopts
    cli.proc.wait(5)
    assert shell.is_running()
    harness.step()  # a look with the CLI gone: no crash, nothing new recorded
    assert harness.kinds().count(names.TOOL_STARTED) == 1
    done = turnwatch("watch", "--once", "--recover", "--grace", "1", "--ledger", str(harness.path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert names.F_PINNED_SESSION in done.stdout or names.F_ORPHAN_TOOL_PROCESS in done.stdout
    wait_until(lambda: not shell.is_running() or shell.status() == psutil.STATUS_ZOMBIE)


def test_two_processes_that_could_be_the_cli_are_neither(
    tmp_path: Path, project: Path, procs: Procs, harness: Harness
) -> None:
    Cli(tmp_path, project, procs)
    Cli(tmp_path, project, procs)
    session(harness.rec, project, ago=0.0)
    harness.step()
    harness.step()
    assert names.RUNTIME_STARTED not in harness.kinds()[0:]  # nothing attributed
    assert len(harness.said) == 1
    assert "2 processes could be its CLI" in harness.said[0]


def test_a_shell_in_a_background_call_is_reported_never_recorded(
    tmp_path: Path, project: Path, procs: Procs, harness: Harness
) -> None:
    cli = Cli(tmp_path, project, procs)
    session(harness.rec, project, ago=0.0)
    harness.step()
    call = {"turn": "cc-1.t1", "call": "toolu_bg", "tool": "Bash"}
    attrs = {names.K_CLASS: "process", names.K_BACKGROUND: True}
    harness.rec(names.TOOL_REQUESTED, "cc-1", 0, attrs=attrs, **call)
    harness.rec(names.TOOL_STARTED, "cc-1", 0, attrs=attrs, **call)
    shell = cli.shell()
    harness.rec(names.TOOL_FINISHED, "cc-1", -0.2, **call)  # "running in background with ID"
    harness.settle()
    assert names.TOOL_STARTED not in [e.kind for e in harness.events]
    (f,) = harness.attr.findings()
    assert (f.kind, f.pid, f.call) == (names.F_BACKGROUND_PROCESS, shell.pid, "toolu_bg")


def test_the_patterns() -> None:
    assert is_cli("gemini-cli", ["node", "/usr/lib/node_modules/.bin/gemini", "-i", "x"])
    assert is_cli("codex", ["/opt/node_modules/@openai/codex/bin/codex.js", "exec"])
    assert is_cli("claude-code", ["claude", "--resume"])
    assert not is_cli("claude-code", ["vim", "claude.md"])
    assert not is_cli("gemini-cli", ["python3", "-c", "import gemini"])
    assert is_shell_command(["/usr/bin/bash", "-c", "sleep 1"])
    assert is_shell_command(["bash", "-lc", "ls"])
    assert not is_shell_command(["bash"])  # an interactive shell: the user's
    assert not is_shell_command(["node", "-c", "x"])


def test_what_it_keeps_is_bounded_by_the_sessions_watched(
    tmp_path: Path, project: Path, procs: Procs, harness: Harness
) -> None:
    """A watchdog running for months: what the attributor keeps of sessions (which CLI, what it
    said) and of processes (recorded ones) goes once they are no longer watched or alive."""
    from turnwatch.watchdog.agentprocs import WATCH_S

    cli = Cli(tmp_path, project, procs)
    session(harness.rec, project, ago=0.0)
    for i in range(100):  # sessions of other CLIs' days, long settled
        session(harness.rec, project, f"old-{i}", ago=0.0)
        harness.rec(names.TURN_SETTLED, f"old-{i}", 1, turn=f"old-{i}.t1")
        harness.rec(names.PROCESSING_CLEARED, f"old-{i}", 1, turn=f"old-{i}.t1")
    harness.step()
    shell = cli.shell()
    harness.settle()
    assert harness.kinds().count(names.TOOL_STARTED) == 1
    shell.kill()
    wait_until(lambda: not shell.is_running() or shell.status() == psutil.STATUS_ZOMBIE)
    harness.step()
    assert harness.kinds().count(names.TOOL_FINISHED) == 1
    attr = harness.attr
    assert len(attr._seen) == 0  # noqa: SLF001 - a process gone is never seen again
    harness.rec(names.TURN_SETTLED, "cc-1", 30, turn="cc-1.t1")
    harness.rec(names.PROCESSING_CLEARED, "cc-1", 30, turn="cc-1.t1")
    harness.step(time.time() + 2 * WATCH_S)  # a day on: nothing is watched any more
    kept = (attr._meta, attr._noted, attr._seen, attr._mine)  # noqa: SLF001
    assert [len(k) for k in kept] == [0, 0, 0, 0]
