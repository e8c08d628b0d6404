"""``dangling_tool_calls``: a LangGraph thread a stopped or dead run left with unanswered tool
calls, found by ``watch --langgraph-checkpoints`` in the real SQLite checkpointer's file, named
by ``explain``, answered by ``recover`` (and by the watchdog itself when the run is known to be
over) through the application's graph, with the messages a wrapped stop writes.

The application runs in its own process (``tests.watchdog.lg_app``): natively cancelled, or
wrapped and SIGKILLed in its tools step. After the repair the thread's history is valid and a
resume runs nothing again.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.conftest import one_line_exit_2, turnwatch
from turnwatch import names

GRAPH = "tests.watchdog.lg_app:graph"
ROOT = Path(__file__).resolve().parents[2]


def app(tmp: Path, *argv: str) -> subprocess.Popen[str]:
    env = {**os.environ, "LG_APP_DIR": str(tmp)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.watchdog.lg_app", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


def ran(tmp: Path, *argv: str) -> str:
    p = app(tmp, *argv)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    return out


def messages(ckpt: Path) -> list[tuple[str, str]]:
    """The thread's history as its latest checkpoint holds it: (type, tool call id or text)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(ckpt)
    try:
        got = SqliteSaver(conn).get_tuple({"configurable": {"thread_id": "t"}})
    finally:
        conn.close()
    assert got is not None
    out = []
    for m in got.checkpoint["channel_values"]["messages"]:
        out.append((type(m).__name__, getattr(m, "tool_call_id", None) or str(m.content)))
    return out


def tw(*argv: str) -> subprocess.CompletedProcess[str]:
    """The console script, from the repository's root (where the application's module is)."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return turnwatch(*argv)
    finally:
        os.chdir(cwd)


def test_a_natively_cancelled_thread_is_found_explained_and_repaired(tmp_path: Path) -> None:
    ckpt, ledger = tmp_path / "checkpoints.sqlite3", tmp_path / "ledger.sqlite3"
    ran(tmp_path, "native", str(ckpt))
    before = ckpt.read_bytes()
    look = ("--langgraph-checkpoints", str(ckpt), "--ledger", str(ledger))

    young = tw("watch", "--once", "--json", *look)
    assert (young.returncode, json.loads(young.stdout)) == (0, []), young.stderr  # may still run
    found = tw("watch", "--once", "--json", "--langgraph-quiet", "0", *look)
    assert found.returncode == 1, found.stderr
    [row] = json.loads(found.stdout)
    assert (row["kind"], row["session"], row["result"]) == (
        names.F_DANGLING_TOOL_CALLS,
        "t",
        "proposed",
    )
    assert "look r1" in row["detail"]
    assert "write w1" in row["detail"]
    assert "not known" in row["detail"]  # no turnwatch session says the run is over
    assert ckpt.read_bytes() == before
    assert not ledger.exists()

    said = tw("explain", "t", "--langgraph-quiet", "0", *look)
    assert said.returncode == 0, said.stderr
    assert names.F_DANGLING_TOOL_CALLS in said.stdout
    assert "r1" in said.stdout

    # Not proven over: the watchdog's own loop never writes it; its operator may.
    auto = tw(
        "watch", "--once", "--recover", "--langgraph-quiet", "0", "--langgraph-graph", GRAPH, *look
    )
    assert auto.returncode == 1, auto.stderr
    assert ("AIMessage", "") in messages(ckpt)[-1:] or messages(ckpt)[-1][0] == "AIMessage"
    fixed = tw("recover", "t", "--yes", "--langgraph-quiet", "0", "--langgraph-graph", GRAPH, *look)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    history = messages(ckpt)
    from turnwatch.integrations.langgraph_checkpoints import LEFT

    assert history[-2:] == [("ToolMessage", "r1"), ("ToolMessage", "w1")]
    assert "1 answered" not in fixed.stdout
    assert "2 answered" in fixed.stdout
    contents = _contents(ckpt)
    assert contents == {"r1": LEFT, "w1": LEFT}

    again = tw("watch", "--once", "--json", "--langgraph-quiet", "0", *look)
    assert (again.returncode, json.loads(again.stdout)) == (0, []), again.stdout
    assert ran(tmp_path, "resume", str(ckpt)).split() == ["AIMessage", "done"]
    assert (tmp_path / "writes.log").read_text() == "w\n"  # the write never ran again
    asked = (tmp_path / "model.log").read_text().splitlines()[-1]
    assert asked == "HumanMessage AIMessage ToolMessage ToolMessage"  # a valid history


def _contents(ckpt: Path) -> dict[str, str]:
    from langchain_core.messages import ToolMessage
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(ckpt)
    try:
        got = SqliteSaver(conn).get_tuple({"configurable": {"thread_id": "t"}})
    finally:
        conn.close()
    assert got is not None
    return {
        str(m.tool_call_id): str(m.content)
        for m in got.checkpoint["channel_values"]["messages"]
        if isinstance(m, ToolMessage)
    }


def test_a_wrapped_run_whose_process_was_killed_is_answered_by_the_watchdog(
    tmp_path: Path,
) -> None:
    """Its session's runtime is gone (pid and start time): the run is known to be over, and the
    watchdog answers the thread's calls itself, at once (no quiet wait)."""
    ckpt, ledger = tmp_path / "checkpoints.sqlite3", tmp_path / "ledger.sqlite3"
    child = app(tmp_path, "wrapped", str(ckpt), str(ledger))
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        live = tw(
            "watch",
            "--once",
            "--json",
            "--langgraph-quiet",
            "0",
            "--langgraph-checkpoints",
            str(ckpt),
            "--ledger",
            str(ledger),
        )
        kinds = {r["kind"] for r in json.loads(live.stdout)}
        assert names.F_DANGLING_TOOL_CALLS not in kinds, live.stdout  # its run goes on
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=10)
    assert messages(ckpt)[-1][0] == "AIMessage"  # the calls, unanswered

    done = tw(
        "watch",
        "--once",
        "--recover",
        "--json",
        "--langgraph-checkpoints",
        str(ckpt),
        "--langgraph-graph",
        GRAPH,
        "--ledger",
        str(ledger),
    )
    rows = {r["kind"]: r for r in json.loads(done.stdout)}
    assert rows[names.F_DANGLING_TOOL_CALLS]["result"] == "ok", done.stdout
    assert done.returncode == 0, done.stdout + done.stderr
    assert messages(ckpt)[-2:] == [("ToolMessage", "r1"), ("ToolMessage", "w1")]
    assert ran(tmp_path, "resume", str(ckpt)).split() == ["AIMessage", "done"]
    assert (tmp_path / "writes.log").read_text() == "w\n"


def test_what_cannot_be_read_or_imported_is_one_line_exit_2(tmp_path: Path) -> None:
    ledger = str(tmp_path / "ledger.sqlite3")
    missing = tmp_path / "nope.sqlite3"
    one_line_exit_2(
        tw("watch", "--once", "--langgraph-checkpoints", str(missing), "--ledger", ledger),
        "--langgraph-checkpoints",
        "nope.sqlite3",
    )
    other = tmp_path / "other.sqlite3"
    sqlite3.connect(other).execute("CREATE TABLE x (a)").connection.commit()
    before = other.read_bytes()
    one_line_exit_2(
        tw("watch", "--once", "--langgraph-checkpoints", str(other), "--ledger", ledger),
        "not a LangGraph SQLite checkpointer",
    )
    assert other.read_bytes() == before
    ckpt = tmp_path / "checkpoints.sqlite3"
    ran(tmp_path, "native", str(ckpt))
    one_line_exit_2(
        tw(
            "watch",
            "--once",
            "--langgraph-checkpoints",
            str(ckpt),
            "--langgraph-graph",
            "no_such_mod:g",
            "--ledger",
            ledger,
        ),
        "--langgraph-graph",
        "no_such_mod",
    )
    one_line_exit_2(
        tw("watch", "--once", "--langgraph-graph", GRAPH, "--ledger", ledger),
        "--langgraph-checkpoints",
    )


def test_a_file_that_is_no_checkpointer_s_is_said_before_langgraph_is_imported(
    tmp_path: Path,
) -> None:
    """A mistyped path is the usual bad input: said at once, not after the ~2 s LangGraph and
    langchain-core take to import (the option sweep saw it run past 30 s on a busy machine)."""
    ledger = str(tmp_path / "ledger.sqlite3")
    other = tmp_path / "other.sqlite3"
    sqlite3.connect(other).execute("CREATE TABLE x (a)").connection.commit()
    for path, said in ((tmp_path / "nope.sqlite3", "no such file"), (other, "not a LangGraph")):
        for argv in (["watch", "--once"], ["recover", "s", "--dry-run"], ["explain", "s"]):
            look = ["--langgraph-checkpoints", str(path), "--ledger", ledger]
            r = subprocess.run(
                [sys.executable, "-X", "importtime", "-m", "turnwatch", *argv, *look],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert r.returncode == 2, (argv, r.stderr[-500:])
            lines = r.stderr.splitlines()
            errors = [ln for ln in lines if not ln.startswith("import time:")]
            assert len(errors) == 1, (argv, errors)
            assert said in errors[0], argv
            imported = {ln.split("|")[-1].strip().split(".")[0] for ln in lines if "|" in ln}
            assert not imported & {"langgraph", "langchain_core"}, argv
