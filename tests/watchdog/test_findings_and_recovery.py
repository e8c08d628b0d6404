"""The watchdog against real processes: find, terminate, refuse, never touch awaited calls."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry

from tests.conftest import Procs, wait_until
from tests.watchdog.helpers import Recorder, aborted_tree, pinned_ledger, spawn_tree
from turnwatch import names
from turnwatch.exporters.metrics import StopMetrics
from turnwatch.runtime.model import RecoveryResult
from turnwatch.runtime.terminate import Pidfds
from turnwatch.tracing.ledger import Ledger, connect, read_events
from turnwatch.tracing.pipeline import Telemetry
from turnwatch.tracing.spans import SpanBuilder
from turnwatch.watchdog.loop import Watchdog
from turnwatch.watchdog.scan import Config, scan
from turnwatch.watchdog.signals import Guard, Target

CFG = Config(grace_s=0.5, slack_s=0.5, rpc_stuck_s=0.5)


def watchdog(path: Path, **kw: object) -> tuple[Watchdog, Ledger]:
    ledger = Ledger(path)
    return Watchdog(path, ledger, ledger.flush, cfg=CFG, **kw), ledger  # type: ignore[arg-type]


def kinds(path: Path) -> list[str]:
    conn = connect(path, readonly=True)
    try:
        return [f.kind for f in scan(conn, cfg=CFG).findings]
    finally:
        conn.close()


async def test_aborted_turn_with_a_live_term_ignoring_tree_is_reaped(
    tmp_path: Path, procs: Procs
) -> None:
    path = tmp_path / "ledger.sqlite3"
    tree = aborted_tree(path, procs)
    assert kinds(path) == [names.F_ABORTED_WITH_LIVE_PROCESS]

    dog, ledger = watchdog(path)
    cycle = await dog.cycle()
    ledger.close()

    (action,) = cycle.actions
    assert action.result is RecoveryResult.OK, action
    assert procs.alive() == []  # the leader and the child, SIGKILLed at the grace end
    assert kinds(path) == []  # recorded as reaped: nothing more to do
    conn = connect(path, readonly=True)
    reaped = conn.execute("SELECT count(*) FROM events WHERE kind='process.reaped'").fetchone()
    assert reaped[0] >= len(tree)  # plus any short-lived member (a sleep) it caught
    # One termination, one recovery record: the SIGTERM step is the watchdog's tools.abort,
    # so a dashboard's sum by (result) counts it once, under a recovery result.
    recovered = [e for _s, e in read_events(conn) if e.kind == names.WATCHDOG_RECOVERED]
    assert [e.attrs["result"] for e in recovered] == [RecoveryResult.OK.value]
    registry = CollectorRegistry()
    metrics = StopMetrics(registry)
    for _s, e in read_events(conn):
        metrics(e)
    by_result = {
        s.labels["result"]: s.value
        for m in registry.collect()
        for s in m.samples
        if s.name == names.M_RECOVERIES + "_total"
    }
    assert by_result == {"ok": 1.0, "failed": 0.0, "refused": 0.0}


async def test_a_decoy_carrying_a_copied_marker_is_never_signalled(
    tmp_path: Path, procs: Procs
) -> None:
    """The marker is a candidate, never proof: a process a user started by hand with the same
    ``TURNWATCH_CALL`` value, outside the recorded group and tree, is named and left alone."""
    path = tmp_path / "ledger.sqlite3"
    marker = "decoy/decoy.c1"  # its own: other tests' trees carry the default one
    tree = spawn_tree(procs, marker=marker)
    rec = Recorder(path)
    rec.runtime(session="decoy")
    rec.aborted_turn(tree[0], session="decoy")
    rec.close()
    decoy = procs.spawn(
        ["sleep", "300"], start_new_session=True, env={**os.environ, "TURNWATCH_CALL": marker}
    )

    dog, ledger = watchdog(path)
    cycle = await dog.cycle()
    ledger.close()

    (action,) = cycle.actions
    assert action.result == "ok", action
    assert "1 marked process(es) outside it not signalled" in action.detail
    assert decoy.status() != psutil.STATUS_ZOMBIE
    assert procs.alive() == [decoy.pid]


async def test_processes_a_finished_call_left_running_are_ended_by_record(
    tmp_path: Path, procs: Procs
) -> None:
    """A dead runtime's call finished leaving two processes (pid and start time recorded)."""
    path = tmp_path / "ledger.sqlite3"
    left = [procs.spawn(["sleep", "300"], start_new_session=True) for _ in range(2)]
    bystander = procs.spawn(["sleep", "300"], start_new_session=True)
    dead = procs.spawn(["true"])
    dead.wait()
    rec = Recorder(path)
    rec("runtime.started", attrs={"pid": dead.pid, "create_time": 1.0, "mode": "adr"})
    rec.started_call(dead.pid, 1.0, ago=30)  # the call's own process is long gone
    rec(
        "tool.finished",
        ago=29,
        turn="s.t1",
        call="s.c1",
        tool="Bash",
        attrs={
            "outcome": "completed",
            "status": "ok",
            "lingering": [[p.pid, p.create_time()] for p in left],
        },
    )
    rec.close()
    assert kinds(path) == [names.F_ORPHAN_TOOL_PROCESS, names.F_PINNED_SESSION]

    dog, ledger = watchdog(path)
    await dog.cycle()
    ledger.close()

    assert procs.alive() == [bystander.pid]
    assert kinds(path) == []


async def test_a_reused_pid_is_not_signalled(tmp_path: Path, procs: Procs) -> None:
    path = tmp_path / "ledger.sqlite3"
    (other,) = spawn_tree(procs)[:1]
    rec = Recorder(path)
    rec.runtime()
    # The recorded process had this pid, but started at another time: it is not this one.
    rec.started_call(other.pid, other.create_time() - 1000, ago=40)
    rec("tools.abort.sent", turn="s.t1", call="s.c1", tool="Bash", ago=30)
    rec.close()
    dog, ledger = watchdog(path)
    cycle = await dog.cycle()
    ledger.close()
    assert [f.kind for f in cycle.findings if f.pid] == []
    assert other.is_running()
    # Judged again through its pidfd, as recovery judges each target before signalling it.
    fds = Pidfds({other.pid: other.create_time() - 1000}, refuse=Guard().check)
    fds.kill()
    assert fds.refused == {other.pid: "start_time_differs"}
    assert other.is_running()


@pytest.mark.parametrize("who", ["pid1", "self", "parent"])
async def test_rows_naming_pid_1_itself_or_its_parent_are_refused(tmp_path: Path, who: str) -> None:
    pid = {"pid1": 1, "self": os.getpid(), "parent": os.getppid()}[who]
    target = psutil.Process(pid)
    path = tmp_path / "ledger.sqlite3"
    rec = Recorder(path)
    rec.runtime(pid=1)  # a runtime that would be "alive": no orphan shortcut
    rec.aborted_turn(target)
    rec.close()
    dog, ledger = watchdog(path)
    cycle = await dog.cycle()
    ledger.close()
    (action,) = [a for a in cycle.actions if a.finding.pid == pid]
    assert action.result is RecoveryResult.REFUSED
    assert sum(dog.guard.refusals.values()) >= 1
    assert target.is_running()
    conn = connect(path, readonly=True)
    recorded = [
        e.attrs["result"] for _s, e in read_events(conn) if e.kind == names.WATCHDOG_RECOVERED
    ]
    conn.close()
    assert recorded == ["refused"]  # reported, and counted as recoveries_total{result="refused"}
    assert Guard().refuse(Target(pid, target.create_time()), None) in {
        "pid_le_1",
        "self",
        "ancestor",
    }


async def test_mutating_call_long_after_the_stop_is_reported_never_signalled(
    tmp_path: Path, procs: Procs
) -> None:
    path = tmp_path / "ledger.sqlite3"
    (server,) = spawn_tree(procs)[:1]  # stands for an MCP server still writing
    rec = Recorder(path)
    rec.runtime()
    rec.aborted_turn(server, tool="mcp__fs__write_file", ended=False, cls="extension")
    rec.close()
    dog, ledger = watchdog(path)
    cycle = await dog.cycle()
    ledger.close()
    assert names.F_AWAIT_OVERDUE in [f.kind for f in cycle.findings]
    assert {a.result for a in cycle.actions if a.finding.kind == names.F_AWAIT_OVERDUE} == {
        "report_only"
    }
    assert server.is_running()
    assert server.status() != psutil.STATUS_STOPPED


async def test_late_result_after_settlement_is_activity_after_settle(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    rec = Recorder(path)
    rec.runtime()
    rec("turn.started", turn="s.t1", ago=20)
    rec("tool.requested", turn="s.t1", call="s.c1", tool="Write", ago=20)
    rec("tool.started", turn="s.t1", call="s.c1", tool="Write", ago=20)
    rec("turn.settled", turn="s.t1", ago=10, attrs={"outcome": "aborted"})
    rec(
        "tool.finished",
        turn="s.t1",
        call="s.c1",
        tool="Write",
        ago=5,
        attrs={"outcome": "completed"},
    )
    rec.close()
    assert names.F_ACTIVITY_AFTER_SETTLE in kinds(path)


async def test_dry_run_signals_nothing(tmp_path: Path, procs: Procs) -> None:
    path = tmp_path / "ledger.sqlite3"
    tree = aborted_tree(path, procs)
    dog, ledger = watchdog(path, dry_run=True)
    cycle = await dog.cycle()
    ledger.close()
    assert [a.result for a in cycle.actions] == ["dry_run"]
    # A SIGTERM is journalled before it is sent, a death recorded after: neither happened.
    conn = connect(path, readonly=True)
    acted = conn.execute(
        "SELECT count(*) FROM events WHERE kind IN ('watchdog.recovered', 'process.reaped')"
    ).fetchone()[0]
    conn.close()
    assert acted == 0
    assert len(procs.alive()) == len(tree)


async def test_runtime_gone_leaves_an_orphan_that_is_reaped(tmp_path: Path, procs: Procs) -> None:
    path = tmp_path / "ledger.sqlite3"
    dead = procs.spawn(["sleep", "0"])
    ct = dead.create_time()
    procs.popens[-1].wait()
    tree = spawn_tree(procs)
    rec = Recorder(path)
    rec("runtime.started", ago=60, attrs={"pid": dead.pid, "create_time": ct, "mode": "adr"})
    rec.started_call(tree[0].pid, tree[0].create_time())
    rec.close()
    # The tool outlived its runtime; the runtime's session is pinned "processing" for good.
    assert set(kinds(path)) == {names.F_ORPHAN_TOOL_PROCESS, names.F_PINNED_SESSION}
    dog, ledger = watchdog(path)
    await dog.cycle()
    ledger.close()
    wait_until(lambda: procs.alive() == [], what="the orphan tree to die")
    assert kinds(path) == []


async def test_a_finding_is_reported_once_while_it_lasts(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    pinned_ledger(path)
    dog, ledger = watchdog(path, recover=False)
    for _ in range(3):
        await dog.cycle()
    ledger.close()
    conn = connect(path, readonly=True)
    reported = conn.execute("SELECT attrs_json FROM events WHERE kind = 'watchdog.finding'")
    kinds = sorted(json.loads(r[0])["finding"] for r in reported)
    conn.close()
    assert kinds == ["abort_rpc_stuck", "pinned_session"]  # once each, not once per scan


async def test_a_refused_recovery_is_an_error_span_and_a_reap_is_not(
    tmp_path: Path, procs: Procs
) -> None:
    """What a backend sees of the watchdog: one watchdog.recover span per recovery, ERROR with
    error.type when it was refused, UNSET when it worked."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    path = tmp_path / "ledger.sqlite3"
    rec = Recorder(path)
    rec.runtime(session="refused", pid=1)
    rec.aborted_turn(psutil.Process(1), session="refused")
    rec.close()
    aborted_tree(path, procs)  # session "s": a term-ignoring tree, reaped
    ledger = Ledger(path)
    sink = Telemetry(ledger=ledger, spans=SpanBuilder(provider.get_tracer("test")))
    dog = Watchdog(path, sink, ledger.flush, cfg=CFG)
    await dog.cycle()
    ledger.close()

    spans = {
        sp.attributes[names.A_SESSION]: sp
        for sp in exporter.get_finished_spans()
        if sp.name == names.SPAN_WATCHDOG_RECOVER and sp.attributes is not None
    }
    assert set(spans) == {"refused", "s"}
    refused, reaped = spans["refused"], spans["s"]
    assert refused.status.status_code is StatusCode.ERROR
    assert refused.attributes is not None
    assert reaped.attributes is not None
    assert refused.attributes[names.A_ERROR_TYPE] == "refused"
    assert refused.attributes[names.A_RECOVERY_RESULT] == "refused"
    assert reaped.status.status_code is StatusCode.UNSET
    assert reaped.attributes[names.A_RECOVERY_RESULT] == "ok"
    assert names.A_ERROR_TYPE not in reaped.attributes
    # The ledger row of each recovery carries its span's ids.
    conn = connect(path, readonly=True)
    rows = conn.execute(
        "SELECT session, span_id FROM events WHERE kind = ?", (names.WATCHDOG_RECOVERED,)
    ).fetchall()
    conn.close()
    assert {(s, int(sid, 16)) for s, sid in rows} == {
        (s, sp.context.span_id) for s, sp in spans.items() if sp.context is not None
    }


def bash_started(path: Path) -> tuple[Recorder, dict[str, str]]:
    """A ledger where a live runtime's turn started a Bash call 30 s ago (its pid long gone):
    the recorder, and the call's turn, id and tool."""
    rec = Recorder(path)
    rec.runtime()
    call = {"turn": "s.t1", "call": "s.c1", "tool": "Bash"}
    rec("turn.started", turn="s.t1", ago=30)
    rec("tool.requested", **call, ago=30, attrs={"class": "process"})
    rec("tool.started", **call, ago=30, attrs={"pid": 999_999, "create_time": 1.0})
    return rec, call


@pytest.mark.parametrize("recovered", [True, False])
async def test_the_answer_a_recoverys_kill_causes_is_not_activity_after_settle(
    tmp_path: Path, recovered: bool
) -> None:
    """A recovery ends a stopped call's processes; the host then answers for the call it ran
    (its process is dead): that answer is the recovery's echo, and the session reads fixed. An
    answer with no recovery before it is still activity after the settle."""
    path = tmp_path / "ledger.sqlite3"
    rec, call = bash_started(path)
    rec("abort.rpc.received", turn="s.t1", ago=25, attrs={"source": "ui", "receipt": "accepted"})
    rec("tools.abort.sent", **call, ago=25, attrs={"policy": "grace", "source": "ui"})
    rec("tool.grace.expired", **call, ago=15)
    rec("tool.finished", **call, ago=15, attrs={"outcome": "aborted", "grace_expired": True})
    rec("turn.settled", turn="s.t1", ago=15, attrs={"outcome": "aborted"})
    rec("abort.rpc.returned", turn="s.t1", ago=15, attrs={"receipt": "accepted"})
    rec("processing.cleared", turn="s.t1", ago=15)
    if recovered:
        rec("process.reaped", **call, ago=6, attrs={"pids": [999_999], "signal": "SIGTERM"})
    rec(
        "tool.finished",
        **call,
        ago=5,
        attrs={"outcome": "aborted", "status": "aborted", "after_abandon": True},
    )
    rec.close()
    assert (names.F_ACTIVITY_AFTER_SETTLE in kinds(path)) is not recovered


@pytest.mark.parametrize("runtime_end_ago", [9.0, 3.0])
async def test_a_runtimes_own_record_arriving_behind_a_recovery_is_not_activity_after_settle(
    tmp_path: Path, runtime_end_ago: float
) -> None:
    """The ledger's writer lagged (an ``ingest --follow`` that died): the watchdog, finding the
    runtime gone, recorded its own settlement; then the runtime's own record of the stop it had
    finished before dying arrived behind it. An end recorded earlier than the one the ledger
    holds arrived late, it did not happen late: no finding. An end after it is still one (the
    chaos test's writer victim: ``watch --once`` reported this forever, exit 1)."""
    path = tmp_path / "ledger.sqlite3"
    rec, call = bash_started(path)
    by_dog = {"settled_by": "watchdog"}
    rec("tool.finished", **call, ago=6, attrs={"outcome": "aborted", **by_dog})
    for kind in ("turn.settled", "abort.rpc.returned", "processing.cleared"):
        rec(kind, turn="s.t1", ago=6, attrs={"outcome": "aborted", **by_dog})
    # The runtime's own record, written behind the watchdog's.
    rec("abort.rpc.received", turn="s.t1", ago=10, attrs={"source": "ui", "receipt": "accepted"})
    rec("tools.abort.sent", **call, ago=10, attrs={"policy": "grace", "source": "ui"})
    done = {"outcome": "aborted", "status": "aborted", "error": "TOOL_ABORTED"}
    rec("tool.finished", **call, ago=runtime_end_ago, attrs=done)
    rec("turn.settled", turn="s.t1", ago=runtime_end_ago, attrs={"outcome": "aborted"})
    rec.close()
    late = runtime_end_ago < 6  # after the end the ledger held: a result that outlived it
    assert (names.F_ACTIVITY_AFTER_SETTLE in kinds(path)) is late
