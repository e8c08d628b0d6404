"""Each policy on real tools: race (Read/Grep), grace (Bash, GenerateImages), await (Write)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psutil
import pytest

from tests.conftest import GRACE, Procs, release_when_read, task_done, until, worker_alive
from turnwatch import names
from turnwatch.runtime import CallHandle, LocalHost, MemorySink, Outcome, Receipt, Runtime
from turnwatch.runtime.tools.process import kill_after
from turnwatch.testing import ManualClock, check_invariants

#: Invariant 3's "small slack" after the grace window.
SLACK_S = 2.0


def pids_in(output: str) -> list[int]:
    return [int(w.split("=")[1]) for w in output.split() if w.startswith("pid=")]


async def test_read_only_call_races_and_its_late_result_is_discarded(
    runtime: Runtime, sink: MemorySink, fifo: Path
) -> None:
    turn = runtime.start_turn("race")
    call = turn.request("Grep", {"pattern": "late", "path": str(fifo)})
    await until(lambda: sink.of(names.TOOL_STARTED, call=call.call_id), what="Grep started")

    assert await runtime.abort("race") is Receipt.ACCEPTED

    result = await call.result()
    assert result.outcome is Outcome.DISCARDED
    assert result.aborted
    settled_at = len(sink)
    # The blocked worker now returns: nothing of it reaches the runtime or the user.
    await release_when_read(fifo)
    await until(lambda: not worker_alive(call.call_id), what="the worker to return")
    await until(lambda: task_done(f"call {call.call_id}"), what="its answer to be handled")
    late = [e for e in sink.events[settled_at:] if e.call == call.call_id]
    assert late == []
    assert check_invariants(sink) == []


async def test_grep_progress_stops_at_the_stop(sink: MemorySink, tmp_path: Path) -> None:
    # A tree large enough to run for a long time: one file hard-linked many times.
    body = tmp_path / "body.txt"
    body.write_text("needle in a haystack\n" * 50_000)
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(3000):
        os.link(body, tree / f"f{i}.txt")
    runtime = Runtime(LocalHost(), grace_s=GRACE, sink=sink)
    turn = runtime.start_turn("tree")
    call = turn.request("Grep", {"pattern": "needle", "path": str(tree), "max_matches": 10**9})
    await until(lambda: sink.of(names.TOOL_PROGRESS, call=call.call_id), what="Grep progress")

    await runtime.abort("tree")

    discarded = sink.of(names.TOOL_RESULT_DISCARDED, call=call.call_id)
    assert len(discarded) == 1
    cut = sink.events.index(discarded[0])
    # The worker reads on until it sees the cancel; whatever it produced meanwhile must not show.
    await until(lambda: not worker_alive(call.call_id), what="the worker to stop")
    assert [e for e in sink.events[cut:] if e.kind == names.TOOL_PROGRESS] == []


async def test_bash_that_ignores_sigterm_is_killed_with_its_tree(
    sink: MemorySink, procs: Procs
) -> None:
    # One manual clock for the runtime's window and the host's SIGKILL deadline: the host's
    # comes first, as the design has it, whatever the machine's load.
    clock = ManualClock()
    runtime = Runtime(LocalHost(clock=clock), grace_s=GRACE, sink=sink, clock=clock)
    turn = runtime.start_turn("s")
    script = (
        "trap '' TERM; "
        "sleep 300 & echo pid=$!; "
        "(trap '' TERM; exec setsid sleep 300) & echo pid=$!; "  # leaves the process group
        "echo collected; sleep 300"
    )
    call = turn.request("Bash", {"command": script})
    await until(
        lambda: (
            "collected"
            in "".join(
                e.attrs.get("text", "") for e in sink.of(names.TOOL_PROGRESS, call=call.call_id)
            )
        ),
        what="script output",
    )
    started = sink.of(names.TOOL_STARTED, call=call.call_id)[0]
    members = [procs.track(started.attrs["pid"])]
    out = "".join(e.attrs.get("text", "") for e in sink.of(names.TOOL_PROGRESS))
    members += [procs.track(pid) for pid in pids_in(out)]
    assert started.attrs["create_time"] == members[0].create_time()

    stop = asyncio.ensure_future(runtime.abort("s"))
    await clock.until_waiting(2)  # the runtime's grace window and the host's SIGTERM → SIGKILL
    clock.advance(kill_after(GRACE))  # the host's deadline only

    result = await call.result()
    await stop
    assert result.outcome is Outcome.ABORTED
    assert result.error_code == names.TOOL_ABORTED
    assert "collected" in result.output  # the output gathered before termination
    assert result.data is not None
    assert result.data["terminated_by"] == "SIGKILL"
    assert sink.of(names.TOOL_GRACE_EXPIRED) == []
    # Invariant 3: within the grace window plus a small slack, nothing of the group or tree.
    await until(lambda: procs.alive() == [], timeout=SLACK_S, what="the whole tree dead")


async def test_bash_that_honours_sigterm_ends_on_sigterm(sink: MemorySink, procs: Procs) -> None:
    runtime = Runtime(LocalHost(), grace_s=30.0, sink=sink)
    turn = runtime.start_turn("s")
    call = turn.request("Bash", {"command": "echo ready; exec sleep 300"})
    await until(lambda: sink.of(names.TOOL_PROGRESS, call=call.call_id), what="ready")
    procs.track(sink.of(names.TOOL_STARTED)[0].attrs["pid"])

    await runtime.abort("s")

    result = await call.result()
    assert result.data is not None
    assert result.data["terminated_by"] == "SIGTERM"
    assert procs.alive() == []


async def running_bash(
    runtime: Runtime, sink: MemorySink, procs: Procs, command: str
) -> CallHandle:
    """A Bash call of a new turn of session ``s``, once it has printed its first line."""
    call = runtime.start_turn("s").request("Bash", {"command": command})
    await sink.wait_for(names.TOOL_PROGRESS, call=call.call_id)
    procs.track(sink.of(names.TOOL_STARTED, call=call.call_id)[0].attrs["pid"])
    return call


async def test_default_grace_window_is_ten_seconds(sink: MemorySink, procs: Procs) -> None:
    clock = ManualClock()
    runtime = Runtime(LocalHost(clock=clock), sink=sink, clock=clock)
    assert runtime.grace_s == 10.0
    call = await running_bash(
        runtime, sink, procs, "trap '' TERM; echo ready; while :; do sleep 1; done"
    )

    stop = asyncio.ensure_future(runtime.abort("s"))
    await clock.until_waiting(2)
    clock.advance(9.0)  # nine seconds on: SIGTERM ignored, nothing killed yet
    await asyncio.sleep(0.2)
    assert not call.outcome
    assert procs.alive() != []
    clock.advance(kill_after(10.0) - 9.0)  # the host's deadline: SIGKILL

    result = await call.result()
    await stop
    assert result.data is not None
    assert result.data["terminated_by"] == "SIGKILL"
    assert result.data["stop_to_exit_s"] == kill_after(10.0)
    assert procs.alive() == []


async def test_a_host_that_misses_the_window_is_abandoned_with_what_it_collected(
    sink: MemorySink, procs: Procs
) -> None:
    # Only the runtime's clock moves: the host (real time, grace 60 s) cannot answer in time.
    clock = ManualClock()
    runtime = Runtime(LocalHost(), grace_s=60.0, sink=sink, clock=clock)
    call = await running_bash(runtime, sink, procs, "trap '' TERM; echo collected; sleep 300")

    stop = asyncio.ensure_future(runtime.abort("s"))
    await clock.until_waiting(1)
    clock.advance(60.0)

    result = await call.result()
    await stop
    assert result.outcome is Outcome.ABORTED
    assert result.data is None  # the runtime's own report: the host had not answered
    assert "collected" in result.output
    (expired,) = sink.of(names.TOOL_GRACE_EXPIRED)
    assert expired.attrs["grace_s"] == 60.0
    # The host still ends what it started at its own (real) deadline; the fixture ends it now.


async def test_generate_images_writes_a_real_png(runtime: Runtime, tmp_path: Path) -> None:
    out = tmp_path / "cat.png"
    turn = runtime.start_turn("s")
    call = turn.request("GenerateImages", {"prompt": "a cat", "out": str(out), "size": 16})
    result = await call.result()
    assert result.outcome is Outcome.COMPLETED
    assert out.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert await turn.finish() == "completed"


async def test_generate_images_stopped_mid_render_leaves_no_file(
    sink: MemorySink, tmp_path: Path
) -> None:
    runtime = Runtime(LocalHost(), grace_s=GRACE, sink=sink)
    out = tmp_path / "slow.png"
    turn = runtime.start_turn("s")
    call = turn.request("GenerateImages", {"prompt": "x", "out": str(out), "steps": 400})
    await until(lambda: sink.of(names.TOOL_PROGRESS, call=call.call_id), what="a sampler step")
    await runtime.abort("s")
    result = await call.result()
    assert result.outcome is Outcome.ABORTED
    assert "step 1/400" in result.output
    assert not out.exists()


async def test_write_in_progress_is_awaited_and_the_file_is_whole(
    sink: MemorySink, tmp_path: Path
) -> None:
    runtime = Runtime(LocalHost(), grace_s=GRACE, sink=sink)
    target = tmp_path / "big.txt"
    content = "0123456789abcdef" * (4 * 1024 * 1024)  # 64 MiB: many chunks after the first
    turn = runtime.start_turn("s")
    call = turn.request("Write", {"path": str(target), "content": content})
    await until(lambda: sink.of(names.TOOL_PROGRESS, call=call.call_id), what="first chunk")

    await runtime.abort("s")

    kinds = sink.kinds(session="s")
    # The stop reached the Write while it ran, and the turn settled only after its result.
    assert kinds.index(names.TOOLS_ABORT_SENT) < kinds.index(names.TOOL_FINISHED)
    assert kinds.index(names.TOOL_FINISHED) < kinds.index(names.TURN_SETTLED)
    result = await call.result()
    assert result.outcome is Outcome.COMPLETED_AFTER_STOP
    assert target.stat().st_size == len(content)
    assert check_invariants(sink) == []


async def test_edit_replaces_once_atomically(runtime: Runtime, tmp_path: Path) -> None:
    target = tmp_path / "a.py"
    target.write_text("x = 1\ny = 2\n")
    turn = runtime.start_turn("s")
    ok = await turn.request("Edit", {"path": str(target), "old": "x = 1", "new": "x = 3"}).result()
    missing = await turn.request("Edit", {"path": str(target), "old": "zzz", "new": ""}).result()
    assert ok.outcome is Outcome.COMPLETED
    assert target.read_text() == "x = 3\ny = 2\n"
    assert missing.outcome is Outcome.FAILED


async def test_glob_and_read(runtime: Runtime, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("beta")
    turn = runtime.start_turn("s")
    found = await turn.request("Glob", {"pattern": "**/*.txt", "path": str(tmp_path)}).result()
    read = await turn.request("Read", {"path": str(tmp_path / "sub" / "b.txt")}).result()
    assert found.output.splitlines() == [str(tmp_path / "a.txt"), str(tmp_path / "sub/b.txt")]
    assert read.output == "beta"


async def test_bad_tool_arguments_fail_the_call_with_a_reason(runtime: Runtime) -> None:
    turn = runtime.start_turn("s")
    result = await turn.request("Grep", {"pattern": "("}).result()
    assert result.outcome is Outcome.FAILED
    assert result.error == "invalid pattern '(': missing ), unterminated subpattern at position 0"
    unknown = await turn.request("Teleport", {}).result()
    assert unknown.outcome is Outcome.FAILED
    assert unknown.error is not None
    assert unknown.error.startswith("unknown tool 'Teleport'; tools: Bash, Edit,")


async def test_escaped_grandchild_found_through_the_subreaper(
    sink: MemorySink, procs: Procs
) -> None:
    host = LocalHost()
    if not host.subreaper:
        pytest.skip("child subreaper needs Linux")
    runtime = Runtime(host, grace_s=GRACE, sink=sink)
    turn = runtime.start_turn("s")
    # The intermediate exits at once: the setsid grandchild re-parents to the host.
    script = "(setsid bash -c 'trap \"\" TERM; sleep 300' & echo pid=$!); echo ok; sleep 300"
    call = turn.request("Bash", {"command": script})
    await until(
        lambda: (
            "ok"
            in "".join(
                e.attrs.get("text", "") for e in sink.of(names.TOOL_PROGRESS, call=call.call_id)
            )
        ),
        what="output",
    )
    out = "".join(e.attrs.get("text", "") for e in sink.of(names.TOOL_PROGRESS))
    escapee = procs.track(pids_in(out)[0])
    await until(lambda: escapee.ppid() == os.getpid(), what="re-parenting to the host")

    await runtime.abort("s")
    await until(
        lambda: not escapee.is_running() or escapee.status() == psutil.STATUS_ZOMBIE,
        timeout=SLACK_S,
        what="the escapee dead within the slack",
    )


async def test_a_finished_call_keeps_its_output_once(runtime: Runtime) -> None:
    """The result carries the output; the call, which the session keeps, drops its buffer."""
    turn = runtime.start_turn("s")
    call = turn.request("Bash", {"command": "head -c 200000 /dev/zero | tr '\\0' x; echo"})
    result = await call.result()
    assert result.outcome is Outcome.COMPLETED
    assert result.output.count("x") == 200_000
    kept = turn.calls[call.call_id]
    assert not kept.output


def test_the_host_kills_within_what_is_left_of_the_runtime_s_window() -> None:
    """The host counts from the runtime's start (tools.abort's deadline), so an abort delivered
    late by a busy loop is killed sooner, and its answer still lands inside the window."""
    assert kill_after(1.0) == pytest.approx(0.65)
    assert kill_after(1.0, 1.0) == pytest.approx(0.65)
    assert kill_after(1.0, 0.5) == pytest.approx(0.25)  # half the window already gone
    assert kill_after(1.0, 0.2) == pytest.approx(0.1)  # never less than half of what is left
    assert kill_after(1.0, -3.0) == 0.0  # overdue: at once
    assert kill_after(1.0, 9.0) == pytest.approx(0.65)  # never later than the window
