"""What an interrupted agent CLI leaves running, found from its processes and recovered, with the
real Gemini CLI, Claude Code and Codex driven offline (Gemini by its fake responses, Claude Code
and Codex by a scripted model server speaking their APIs). A decoy with the same command line
outside the CLI's tree is never signalled, nor is the CLI itself."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import psutil
import pytest

from tests.watchdog import agent_clis, model_server
from turnwatch import names

pytestmark = pytest.mark.slow


def rows(ledger: Path, sql: str, *args: object) -> list[tuple[object, ...]]:
    if not ledger.exists():
        return []
    conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


OF_KIND = "SELECT 1 FROM events WHERE kind = ?"  # events of one kind


def finding_kinds(ledger: Path) -> set[object]:
    """The kinds of the findings the watchdog recorded."""
    sql = "SELECT json_extract(attrs_json, '$.finding') FROM events WHERE kind = ?"
    return {r[0] for r in rows(ledger, sql, names.WATCHDOG_FINDING)}


def ended(ledger: Path, pid: object) -> None:
    """Wait until the watchdog recorded the end of the command it recorded as ``pid``."""
    sql = "SELECT 1 FROM calls WHERE pid = ? AND ended_ts IS NOT NULL"
    wait_for("the command's end recorded", lambda: rows(ledger, sql, pid))


def wait_for(what: str, check: object, timeout: float = 60.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()  # type: ignore[operator]
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid: int, create_time: float) -> bool:
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and abs(p.create_time() - create_time) < 0.05
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def watchdog(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """``turnwatch watch --agents`` over the test's CLI home, recovering, grace 1 s."""
    ledger = tmp_path / "ledger.sqlite3"
    home = tmp_path / "home"
    argv = [str(Path(sys.executable).with_name("turnwatch")), "watch", "--agents"]
    argv += ["--ledger", str(ledger), "--interval", "0.5", "--grace", "1", "--metrics-addr", ""]
    argv += ["--gemini-dir", str(home / ".gemini" / "tmp")]
    argv += ["--claude-dir", str(home / ".claude" / "projects")]
    argv += ["--codex-dir", str(home / ".codex" / "sessions")]
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        yield ledger, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _out, err = proc.communicate()
        print(err)


@contextmanager
def headless(cli: str, tmp: Path, command: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """``cli`` run headless in its own terminal session, its model scripted to run ``command``
    with its shell tool: (the CLI, its project directory)."""
    project = tmp / "project"
    out = open(tmp / "cli.out", "wb")  # noqa: SIM115 - closed below
    try:
        if cli == "gemini":
            exe = agent_clis.gemini()
            _home, project, responses, env = agent_clis.gemini_home(tmp, command)
            argv = [str(exe), "-p", "run it", "--yolo", "--skip-trust"]
            argv += ["--fake-responses-non-strict", str(responses), "-o", "json"]
            yield _start(argv, project, env, out), project
            return
        exe = agent_clis.installed(cli)
        project.mkdir()
        with model_server.serve(model_server.Script(command)) as url:
            if cli == "claude":
                env = agent_clis.claude_env(tmp, url)
                # Not --dangerously-skip-permissions: Claude Code refuses it as root.
                argv = [str(exe), "-p", "run it", "--allowedTools", "Bash"]
            else:
                env = agent_clis.codex_env(tmp, url)
                argv = [str(exe), "exec", "--skip-git-repo-check", "run it"]
            yield _start(argv, project, env, out), project
    finally:
        out.close()


def _start(
    argv: list[str], project: Path, env: dict[str, str], out: IO[bytes]
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own terminal session: Ctrl-C goes to its group
    )


#: (CLI, how it is stopped, the command, what the CLI does to the command) as measured here.
CASES = [
    ("gemini", signal.SIGINT, "sleep 1000", "lives"),
    ("gemini", signal.SIGINT, "trap '' TERM; sleep 1000", "lives"),
    ("claude", signal.SIGINT, "sleep 1000", "killed"),
    ("claude", signal.SIGINT, "trap '' TERM; sleep 1000", "killed"),
    ("claude", signal.SIGKILL, "sleep 1000", "lives"),
    ("codex", signal.SIGINT, "sleep 1000", "killed"),
    ("codex", signal.SIGINT, "trap '' TERM; sleep 1000", "killed"),
    # Codex's command does not outlive it even then: the kernel ends it with its parent.
    ("codex", signal.SIGKILL, "sleep 1000", "killed"),
]


@pytest.mark.parametrize(
    ("cli", "stop", "command", "fate"),
    CASES,
    ids=[
        f"{cli}-{'ctrl-c' if stop == signal.SIGINT else 'crash'}"
        + ("-ignores-term" if "trap" in cmd else "")
        for cli, stop, cmd, _fate in CASES
    ],
)
def test_a_headless_cli_stopped_what_lives_on_is_ended_and_nothing_else(
    tmp_path: Path,
    watchdog: tuple[Path, subprocess.Popen[str]],
    cli: str,
    stop: signal.Signals,
    command: str,
    fate: str,
) -> None:
    ledger, _watch = watchdog
    with headless(cli, tmp_path, command) as (proc, project):
        # The decoy: the same command line, outside the CLI's tree. It must outlive everything.
        decoy = subprocess.Popen(
            ["/usr/bin/bash", "-c", command], cwd=project, start_new_session=True
        )
        try:
            recorded = wait_for(
                "the CLI's command recorded",
                lambda: rows(
                    ledger, "SELECT pid, create_time, session FROM calls WHERE pid IS NOT NULL"
                ),
            )
            (shell_pid, shell_ct, session) = recorded[0]  # type: ignore[index]
            assert isinstance(shell_pid, int)
            assert isinstance(shell_ct, float)
            runtime = rows(ledger, "SELECT runtime_pid FROM sessions WHERE session = ?", session)
            # The CLI, by its command line and project (Codex: the binary its node launcher runs).
            tree = {proc.pid} | {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
            assert len(runtime) == 1
            assert runtime[0][0] in tree
            sleeper = wait_for(
                "the sleep",
                lambda: (
                    [
                        p
                        for p in psutil.Process(shell_pid).children(recursive=True)
                        if p.name() == "sleep"
                    ]
                    or (
                        [psutil.Process(shell_pid)]
                        if psutil.Process(shell_pid).name() == "sleep"
                        else []
                    )
                ),
            )[0]  # type: ignore[index]
            sleeper_ct = sleeper.create_time()

            os.killpg(proc.pid, stop)  # Ctrl-C in the CLI's terminal, or a crash
            proc.wait(timeout=30)
            if fate == "killed":
                wait_for(
                    "the CLI to end its command",
                    lambda: not alive(sleeper.pid, sleeper_ct),
                    timeout=30,
                )
                # A CLI killed outright logs nothing; Claude Code on Ctrl-C usually logs the
                # interrupt, but has exited before writing it (seen once in CI): then the
                # watchdog settles the turn of a CLI that is gone, which the finding says.
                if stop == signal.SIGINT and cli != "claude":
                    wait_for(
                        "the interrupt read from the CLI's log",
                        lambda: rows(ledger, OF_KIND, names.STOP_CLICKED),
                    )
                ended(ledger, shell_pid)  # the watchdog saw it gone: nothing left to end
                reaped = rows(ledger, OF_KIND, names.PROCESS_REAPED)
                assert reaped == []
            else:
                # The field bug, reproduced: the CLI is gone, its command lives on…
                assert alive(sleeper.pid, sleeper_ct)
                # …until the watchdog ends it (SIGKILL after the window if it ignores SIGTERM).
                wait_for(
                    "the left-behind command ended",
                    lambda: not alive(shell_pid, shell_ct) and not alive(sleeper.pid, sleeper_ct),
                    timeout=60,
                )
                kinds = finding_kinds(ledger)
                assert kinds & {names.F_ORPHAN_TOOL_PROCESS, names.F_PINNED_SESSION}
                # The processes are gone a moment before the watchdog has seen them go (their
                # pidfds) and written so (seen once in CI): wait for the record.
                wait_for(
                    "the watchdog's process.reaped recorded",
                    lambda: rows(ledger, OF_KIND, names.PROCESS_REAPED),
                    timeout=30,
                )
            assert decoy.poll() is None  # nothing outside the CLI's tree is touched
        finally:
            for p in (proc, decoy):
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def test_gemini_interactive_esc_kills_its_command_and_the_watchdog_touches_nothing(
    tmp_path: Path, watchdog: tuple[Path, subprocess.Popen[str]]
) -> None:
    """In a terminal, Esc cancels the request: the CLI ends its command and logs the cancel.
    turnwatch records the stop, finds nothing left running, and signals nothing."""
    exe = agent_clis.gemini()
    ledger, _watch = watchdog
    _home, project, responses, env = agent_clis.gemini_home(tmp_path, "sleep 1000")
    decoy = subprocess.Popen(["/usr/bin/bash", "-c", "sleep 1000"], start_new_session=True)
    argv = [str(exe), "-i", "run it", "--yolo", "--skip-trust"]
    argv += ["--fake-responses-non-strict", str(responses)]
    cli, screen = pty_spawn(argv, cwd=project, env=env)
    try:
        shell = wait_for(
            "the CLI's shell recorded",
            lambda: rows(ledger, "SELECT pid, create_time FROM calls WHERE pid IS NOT NULL"),
        )[0]  # type: ignore[index]
        sleeper = wait_for(
            "the sleep",
            lambda: list(psutil.Process(shell[0]).children(recursive=True)),
        )[0]  # type: ignore[index]
        os.write(screen, b"\x1b")  # Esc
        wait_for(
            "the CLI to end its command", lambda: not alive(sleeper.pid, sleeper.create_time())
        )
        wait_for(
            "the cancel read from the log",
            lambda: rows(ledger, OF_KIND, names.STOP_CLICKED),
        )
        ended(ledger, shell[0])  # the watchdog saw it gone: nothing left to end
        kinds = finding_kinds(ledger)
        assert not kinds & {names.F_ORPHAN_TOOL_PROCESS, names.F_ABORTED_WITH_LIVE_PROCESS}
        assert rows(ledger, OF_KIND, names.PROCESS_REAPED) == []
        assert psutil.pid_exists(cli)  # the CLI itself, untouched, waits for the next prompt
        assert decoy.poll() is None
    finally:
        os.kill(cli, signal.SIGKILL)
        os.waitpid(cli, 0)
        os.close(screen)
        decoy.kill()
        decoy.wait()


def pty_spawn(argv: list[str], *, cwd: Path, env: dict[str, str]) -> tuple[int, int]:
    """``argv`` in a new terminal, its output drained in a thread: (pid, the terminal's fd)."""
    import pty
    import threading

    pid, fd = pty.fork()
    if pid == 0:  # the child: exec, or exit without running any of pytest's cleanup
        try:
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)

    def drain() -> None:
        try:
            while os.read(fd, 65536):
                pass
        except OSError:
            return

    threading.Thread(target=drain, daemon=True).start()
    return pid, fd
