"""What a person reads at 80 columns, on a terminal (a pty) and in a pipe: nothing cut to an
ellipsis, calls of the same tool told apart, and the truth about an empty filter."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
from pathlib import Path

import hypothesis
import pytest
from hypothesis import strategies as st

from tests import streams
from tests.conftest import Procs, turnwatch
from tests.watchdog.helpers import aborted_tree


def on_a_tty(*argv: str, columns: int = 80, answer: tuple[str, str] | None = None) -> str:
    """Run the console script on a pseudo-terminal ``columns`` wide; its whole output.
    ``answer``: (prompt, reply) typed when the prompt shows."""
    exe = shutil.which("turnwatch", path=os.path.dirname(sys.executable))
    assert exe is not None
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "50", "TERM": "xterm"}
    proc = subprocess.Popen([exe, *argv], stdin=follower, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    out = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
        if answer is not None and answer[0].encode() in out:
            os.write(leader, answer[1].encode() + b"\n")
            answer = None
    proc.wait(timeout=30)
    os.close(leader)
    return out.decode(errors="replace")


@pytest.fixture(scope="module")
def demo_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("demo") / "ledger.sqlite3"
    assert turnwatch("demo", "--grace", "1", "--ledger", str(path), timeout=120).returncode == 0
    return path


def visible_lines(text: str) -> list[str]:
    import re

    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r\n", "\n")
    # What the terminal shows: of a line redrawn with \r (the spinner), its last state; the
    # spinner itself ("running the demo…") is not output.
    shown = [ln.split("\r")[-1] for ln in plain.split("\n")]
    return [ln for ln in shown if ln.strip() and "running the demo" not in ln]


def test_explain_at_80_columns_cuts_nothing(demo_ledger: Path) -> None:
    out = visible_lines(on_a_tty("explain", "demo-adr", "--ledger", str(demo_ledger)))
    assert all(len(ln) <= 80 for ln in out), max(out, key=len)
    assert not any("…" in ln for ln in out), [ln for ln in out if "…" in ln]
    body = "\n".join(out)
    assert "Write c3" in body  # two Writes, told apart by their call ids
    assert "Write c5" in body
    assert "completed_after_stop" in body


def test_the_demo_at_80_columns_shows_every_column(tmp_path: Path) -> None:
    ledger = tmp_path / "l.sqlite3"
    out = visible_lines(on_a_tty("demo", "--grace", "1", "--ledger", str(ledger)))
    # The command to try is one line, whole (the terminal wraps it; a copy takes it all).
    assert f"Try: turnwatch explain demo-legacy --ledger {ledger}" in out
    out = [ln for ln in out if not ln.startswith(("Try: ", "Ledger: "))]
    assert all(len(ln) <= 80 for ln in out), max(out, key=len)
    body = "\n".join(out)
    assert "process/grace" in body  # the policy
    assert "terminated by SIGKILL" in body  # the detail
    assert "…" not in body


def test_piped_output_is_not_truncated(demo_ledger: Path) -> None:
    result = turnwatch("explain", "demo-adr", "--ledger", str(demo_ledger))
    assert result.returncode == 0
    assert "…" not in result.stdout
    assert "completed_after_stop" in result.stdout


def test_an_empty_filter_says_what_exists(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite3"
    src = streams.write(tmp_path / "e.jsonl", streams.four_states()[:4])  # runtimes only: idle
    assert turnwatch("ingest", str(src), "--ledger", str(path)).returncode == 0
    out = turnwatch("sessions", "--pinned", "--ledger", str(path)).stdout
    assert out.strip() == "no pinned sessions (4 session(s) in this ledger)"


def test_a_second_demo_into_the_same_ledger_finds_nothing_false(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite3"
    for _ in range(2):
        assert turnwatch("demo", "--grace", "1", "--ledger", str(path), timeout=120).returncode == 0
    looked = turnwatch("watch", "--once", "--json", "--ledger", str(path))
    assert "activity_after_settle" not in looked.stdout
    assert looked.returncode == 0, looked.stdout


def test_help_shows_every_default_at_80_columns() -> None:
    out = visible_lines(on_a_tty("watch", "--help"))
    assert all(len(ln) <= 80 for ln in out), max(out, key=len)
    body = " ".join(" ".join(out).split())
    assert "[default: 5.0]" in body
    assert "[default: 127.0.0.1:9464]" in body
    assert "here /" in body  # the default ledger, resolved
    assert "<bool>" not in body


def test_recover_asks_on_a_terminal_and_does_nothing_on_no(tmp_path: Path, procs: Procs) -> None:
    path = tmp_path / "ledger.sqlite3"
    tree = aborted_tree(path, procs)
    out = on_a_tty(
        "recover", "s", "--grace", "1", "--ledger", str(path), answer=("Take these actions?", "n")
    )
    assert "would terminate pid" in out
    assert all(p.is_running() for p in tree)
    out = on_a_tty(
        "recover", "s", "--grace", "1", "--ledger", str(path), answer=("Take these actions?", "y")
    )
    assert "→ ok" in out
    assert procs.alive() == []


@hypothesis.given(
    start=st.floats(-5, 5),
    abort=st.none() | st.floats(0, 5),
    end=st.none() | st.floats(0, 5),
    width=st.integers(1, 60),
)
def test_a_timeline_bar_is_never_wider_than_its_column(
    start: float, abort: float | None, end: float | None, width: int
) -> None:
    """A bar one character too wide is cut at its end: the █ of a stop that came last was
    lost (#29 item 14). Every bar fits, and a call the stop reached keeps its █."""
    from turnwatch.cli.waterfall import ToolRow, _bar

    if end is not None:
        end = max(end, start, abort or 0.0)
    row = ToolRow("c", "Bash", "process", "grace", "aborted", start, abort, end)
    bar = _bar(row, 5.0, width).plain
    assert len(bar) <= width, (bar, width)
    if abort is not None:
        assert "█" in bar


def test_ids_are_never_cut_at_80_columns(tmp_path: Path, procs: Procs) -> None:
    """At 80 columns ``sessions`` cut UUID session and turn ids to ``01a011e2…`` and findings
    to ``orphan_to…``, and ``watch --once`` broke its rows mid-command (#29 item 12): an id
    that cannot be copied into ``explain`` is useless. Each now stands whole on its line."""
    from tests.integrations.agent_arcs import DATA
    from tests.watchdog.helpers import Recorder, spawn_tree
    from turnwatch.tracing import view
    from turnwatch.tracing.ledger import connect

    path = tmp_path / "l.sqlite3"
    files = sorted(DATA.glob("claudecode/*/*/recordings/*/transcript.jsonl"))[:3]
    assert turnwatch("ingest", *map(str, files), "--ledger", str(path)).returncode == 0
    sid = "01a011e2-7c1b-4d5e-9f00-0123456789ab"
    tree = spawn_tree(procs)
    rec = Recorder(path)
    rec.runtime(session=sid)
    rec.aborted_turn(tree[0], session=sid)
    rec.close()
    conn = connect(path, readonly=True)
    rows = view.sessions(conn)
    conn.close()
    out = visible_lines(on_a_tty("sessions", "--ledger", str(path)))
    assert not any("…" in ln for ln in out), out
    for r in rows:
        assert any(r.session in ln.split() for ln in out), (r.session, out)
        assert r.turn is not None
        assert any(r.turn in ln.split() for ln in out), (r.turn, out)
    assert any("orphan_tool_process" in ln or "aborted_with_live_process" in ln for ln in out)
    watched = visible_lines(on_a_tty("watch", "--once", "--grace", "1", "--ledger", str(path)))
    assert any(sid in ln.split() for ln in watched), watched
    assert not any("…" in ln for ln in watched), watched
