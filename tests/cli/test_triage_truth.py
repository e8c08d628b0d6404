"""Triage that tells the truth (#29): a turn never stopped is drawn as one, ages read at a
glance, an agent CLI's session names its CLI, a recorded process alive counts as live, the
demo counts only its own leftovers, and looking or refusing changes no file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil

from tests.conftest import Procs, turnwatch
from tests.watchdog.helpers import Recorder
from turnwatch.cli.demo.scenario import leftovers
from turnwatch.runtime import Answer, LocalHost, Runtime
from turnwatch.runtime.events import Event
from turnwatch.runtime.tools.proctree import CALL_MARKER
from turnwatch.tracing import Ledger
from turnwatch.tracing.ages import age, ago


def test_a_time_ahead_of_this_clock_is_said_to_be() -> None:
    """A runtime three hours ahead (its local time written as UTC) is not "0 s ago": a
    session that looks fresh in triage is one nobody looks at."""
    now = 1_764_900_000.0
    assert ago(now + 3 * 3600, now) == "3 h 0 min ahead"
    assert ago(now + 30, now) == "0 s ago"  # two machines' clocks: within a minute is now
    assert ago(now - 75, now) == "1 min 15 s ago"
    assert ago(None, now) == "-"


def test_ages_read_at_a_glance() -> None:
    assert [age(s) for s in (12, 245, 11_520, 20_462_400)] == [
        "12 s",
        "4 min 5 s",
        "3 h 12 min",
        "236 d",
    ]


def test_a_turn_never_stopped_is_not_drawn_as_a_stop(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    rec = Recorder(path)
    rec("turn.started", turn="s.t1", ago=5)
    rec("tool.requested", turn="s.t1", call="s.c1", tool="Read", ago=5)
    rec(
        "tool.finished",
        turn="s.t1",
        call="s.c1",
        tool="Read",
        ago=4,
        attrs={"outcome": "completed"},
    )
    rec("turn.settled", turn="s.t1", ago=4, attrs={"outcome": "completed"})
    rec.close()
    told = turnwatch("explain", "s", "--ledger", str(path), env={"COLUMNS": "120"})
    assert told.returncode == 0, told.stderr
    assert "Stop of turn" not in told.stdout
    assert "never stopped" in told.stdout


def test_an_agent_clis_session_names_its_cli_and_a_live_recorded_pid_counts(
    tmp_path: Path, procs: Procs
) -> None:
    path = tmp_path / "ledger.sqlite3"
    sleeper = procs.spawn(["sleep", "60"])
    rec = Recorder(path)
    rec("runtime.started", "cli", 30, attrs={"source": "claude-code"})
    rec("turn.started", "cli", 30, turn="cli.t1")
    rec("tool.requested", "cli", 30, turn="cli.t1", call="b", tool="Bash")
    rec.started_call(sleeper.pid, sleeper.create_time(), session="cli", ago=29)
    rec.close()
    shown = turnwatch("sessions", "--json", "--ledger", str(path))
    (row,) = [r for r in json.loads(shown.stdout) if r["session"] == "cli"]
    assert row["source"] == "claude-code"
    assert row["live_processes"] == 1
    table = turnwatch("sessions", "--ledger", str(path), env={"COLUMNS": "160"})
    assert "claude-code" in table.stdout


def test_the_demo_counts_only_its_own_leftovers(procs: Procs) -> None:
    ours = procs.spawn(["sleep", "60"], env={**os.environ, CALL_MARKER: "demo-adr/demo-adr.r.c1"})
    stranger = procs.spawn(["sleep", "60"], env={**os.environ, CALL_MARKER: "demo-x"})
    started = [Event("tool.started", "demo-adr", 1.0, turn="demo-adr.r", call="demo-adr.r.c1")]
    since = min(p.create_time() for p in (ours, stranger)) - 1
    assert leftovers(started, since) == [ours.pid]
    assert stranger.pid not in leftovers(started, since)
    assert leftovers(started, psutil.Process().create_time() + 10**6) == []  # older: not ours


def test_looking_at_a_truncated_ledger_and_a_refused_demo_change_no_file(tmp_path: Path) -> None:
    whole = tmp_path / "whole.sqlite3"
    rec = Recorder(whole)
    for i in range(200):
        rec("turn.started", f"s{i}", turn=f"s{i}.t1")
    rec.close()
    data = whole.read_bytes()
    cut = tmp_path / "cut.sqlite3"
    cut.write_bytes(data[: len(data) // 2])
    before = sorted(os.listdir(tmp_path))
    looked = turnwatch("sessions", "--ledger", str(cut))
    assert looked.returncode == 2
    assert sorted(os.listdir(tmp_path)) == before  # no -wal, no -shm beside it
    refused = turnwatch("demo", "--ledger", str(tmp_path / "new.sqlite3"), "--serve-metrics", "x")
    assert refused.returncode == 2
    assert sorted(os.listdir(tmp_path)) == before  # the bad address refused before any file


def test_version_and_the_demos_own_ledger_default() -> None:
    done = turnwatch("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("turnwatch ")
    helped = turnwatch("demo", "--help")
    assert "a temporary one" in helped.stdout
    assert "$TURNWATCH_LEDGER" not in helped.stdout


def test_explain_and_recover_agree_on_what_holds_a_session(tmp_path: Path) -> None:
    """An agent CLI's turn waiting on a call that has not returned, with nothing to act on yet:
    explain said "Recover with …" while recover --dry-run said nothing holds it (#29 item 2).
    Both now ask one function, and say the same: what it waits for, and nothing to recover."""
    path = tmp_path / "ledger.sqlite3"
    rec = Recorder(path)
    rec("runtime.started", "cli", 30, attrs={"source": "claude-code"})
    rec("turn.started", "cli", 30, turn="cli.t1")
    rec("tool.requested", "cli", 20, turn="cli.t1", call="w", tool="Write")
    rec("tool.started", "cli", 20, turn="cli.t1", call="w", tool="Write")
    rec.close()
    env = {"COLUMNS": "120"}
    told = turnwatch("explain", "cli", "--ledger", str(path), env=env)
    plan = turnwatch("recover", "cli", "--dry-run", "--ledger", str(path), env=env)
    assert told.returncode == plan.returncode == 0, told.stderr + plan.stderr
    assert "Recover with" not in told.stdout
    for out in (told.stdout, plan.stdout):
        assert "Write w" in out, out
        assert "has not returned" in out, out
        assert "nothing to recover" in out, out
    # With something to act on, both say so, and recover lists the action explain points to.
    rec = Recorder(path)
    rec("turn.started", "p", 900, turn="p.t1")
    rec("tool.requested", "p", 900, turn="p.t1", call="r", tool="Read")
    rec("stop.clicked", "p", 800, turn="p.t1")
    rec("agent.abort.called", "p", 800, turn="p.t1")
    rec.close()
    told = turnwatch("explain", "p", "--ledger", str(path), env=env)
    plan = turnwatch("recover", "p", "--dry-run", "--ledger", str(path), env=env)
    assert "Recover with: turnwatch recover p" in told.stdout, told.stdout
    assert "would" in plan.stdout, plan.stdout


def test_explain_shows_what_the_watchdog_found_and_what_its_recovery_did(tmp_path: Path) -> None:
    """A session the watchdog recovered: explain's steps were the walk's alone ("abort walk
    started, source watchdog"), not what the watchdog saw 20 s after the click, nor what its
    recovery did; the on-call engineer reading it could not tell why the stop took 20 s."""
    path = tmp_path / "ledger.sqlite3"
    rec = Recorder(path)
    t, c = "s.t1", "s.t1.c1"
    rec("turn.started", turn=t, ago=60)
    rec("tool.requested", turn=t, call=c, tool="Grep", ago=60, attrs={"class": "read_only"})
    rec("stop.clicked", turn=t, ago=50, attrs={"source": "ui"})
    rec("abort.rpc.received", turn=t, ago=50, attrs={"source": "ui", "receipt": "accepted"})
    pending = {"finding": "pinned_session", "detail": "the abort RPC is still pending"}
    rec("watchdog.finding", turn=t, ago=30, attrs=pending)
    rec("abort.walk.started", turn=t, ago=30, attrs={"source": "watchdog", "inflight": 1})
    rec(
        "tool.result.discarded", turn=t, call=c, tool="Grep", ago=30, attrs={"outcome": "discarded"}
    )
    rec("turn.settled", turn=t, ago=30, attrs={"outcome": "aborted"})
    rec("abort.rpc.returned", turn=t, ago=30, attrs={"receipt": "accepted"})
    rec("processing.cleared", turn=t, ago=30)
    done = {"result": "ok", "action": "call abort() in process", "receipt": "joined"}
    rec("watchdog.recovered", turn=t, ago=30, attrs=done)
    rec.close()
    told = turnwatch("explain", "s", "--json", "--ledger", str(path))
    assert told.returncode == 0, told.stderr
    steps = {label: (offset, detail) for offset, label, detail in json.loads(told.stdout)["steps"]}
    offset, detail = steps["watchdog found pinned_session"]
    assert 19 < offset < 21
    assert detail == "the abort RPC is still pending"
    assert steps["watchdog recovered"][1] == "call abort() in process, result ok, receipt joined"
    text = turnwatch("explain", "s", "--ledger", str(path), env={"COLUMNS": "120"}).stdout
    assert "watchdog found pinned_session" in text
    assert "watchdog recovered" in text


def test_explain_of_a_turn_never_stopped_still_shows_what_the_watchdog_found(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.sqlite3"
    rec = Recorder(path)
    rec("turn.started", turn="s.t1", ago=60)
    rec("turn.settled", turn="s.t1", ago=50, attrs={"outcome": "completed"})
    left = {"finding": "background_process", "detail": "pid 4242 (npm run dev) outlived its call"}
    rec("watchdog.finding", turn="s.t1", ago=20, attrs=left)
    rec.close()
    told = turnwatch("explain", "s", "--ledger", str(path), env={"COLUMNS": "120"})
    assert told.returncode == 0, told.stderr
    assert "never stopped" in told.stdout
    assert "watchdog found background_process" in told.stdout
    assert "outlived its call" in told.stdout


def test_a_call_that_never_began_is_not_said_to_run(tmp_path: Path) -> None:
    """A call waiting for its user's answer, or for a slot, has not begun: ``explain`` says
    which, as its JSON does, rather than "running" (a reader then looks for its process)."""
    path = tmp_path / "ledger.sqlite3"
    rec = Recorder(path)
    rec.runtime()
    rec("turn.started", turn="s.t1", ago=60)
    rec("tool.requested", turn="s.t1", call="ask", tool="Write", ago=60)
    rec("permission.requested", turn="s.t1", call="ask", tool="Write", ago=60)
    rec("tool.requested", turn="s.t1", call="wait", tool="Read", ago=60)
    rec("tool.requested", turn="s.t1", call="run", tool="Grep", ago=60)
    rec("tool.started", turn="s.t1", call="run", tool="Grep", ago=59)
    rec.close()
    told = turnwatch("explain", "s", "--ledger", str(path), "--json")
    assert told.returncode == 0, told.stderr
    outcomes = {t["call"]: t["outcome"] for t in json.loads(told.stdout)["tools"]}
    assert outcomes == {"ask": "awaiting_permission", "wait": "queued", "run": "running"}
    shown = turnwatch("explain", "s", "--ledger", str(path), env={"COLUMNS": "120"})
    assert "awaiting_permission" in shown.stdout
    listed = turnwatch("sessions", "--ledger", str(path), "--json")  # the live page's rows
    (row,) = json.loads(listed.stdout)
    assert {c["call"]: c["phase"] for c in row["calls"]} == outcomes


async def test_explain_shows_an_approval_the_stop_came_before(tmp_path: Path) -> None:
    """The user approved a prompt after clicking Stop, and turnwatch refused it: explain said
    nothing of it, and the on-call engineer asked "why did my write never run?" had no answer
    in the timeline. It is a step now, at its offset, with the call it was for."""
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    rt = Runtime(LocalHost(), sink=ledger, grace_s=1.0)
    turn = rt.start_turn("s")
    write = {"path": str(tmp_path / "x"), "content": "x"}
    asked = turn.request("Write", write, ask_permission=True)  # its prompt open on return
    await rt.abort("s")
    assert rt.answer_permission("s", asked.call_id, True) is Answer.LATE
    rt.answer_permission("s", asked.call_id, False)  # a "deny" as late says so too
    ledger.close()
    told = turnwatch("explain", "s", "--json", "--ledger", str(path))
    assert told.returncode == 0, told.stderr
    steps = [(label, detail) for _offset, label, detail in json.loads(told.stdout)["steps"]]
    assert ("approval after the stop, refused", f"call {asked.call_id}") in steps
    assert ("answer after the stop, refused", f"call {asked.call_id}") in steps
    text = turnwatch("explain", "s", "--ledger", str(path), env={"COLUMNS": "120"}).stdout
    assert "approval after the stop, refused" in text
