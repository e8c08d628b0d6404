"""abort(): receipts, permissions, admission, early aborts, modes, and bad input."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import GRACE, release_when_read, task_done, until
from turnwatch import names
from turnwatch.runtime import (
    AbortRequest,
    Answer,
    CallIdReusedError,
    ExecuteRequest,
    HostStatus,
    LocalHost,
    MemorySink,
    Mode,
    Outcome,
    Receipt,
    Runtime,
    StopSource,
    ToolClass,
    UnknownSessionError,
    UnknownTurnError,
)
from turnwatch.testing import check_invariants


def ask_for(*tools: str):  # type: ignore[no-untyped-def]
    return lambda tool, _cls: tool in tools


async def test_six_stops_settle_once(runtime: Runtime, sink: MemorySink, fifo: Path) -> None:
    turn = runtime.start_turn("s")
    turn.request("Read", {"path": str(fifo)})
    receipts = await asyncio.gather(*(runtime.abort("s") for _ in range(6)))
    assert receipts[0] is Receipt.ACCEPTED
    assert receipts[1:] == [Receipt.JOINED] * 5
    assert len(sink.of(names.TURN_SETTLED)) == 1
    assert len(sink.of(names.PROCESSING_CLEARED)) == 1
    assert await runtime.abort("s") is Receipt.ALREADY_SETTLED


async def test_stop_without_a_live_turn_is_stale(runtime: Runtime) -> None:
    turn = runtime.start_turn("s")
    await turn.finish()
    assert await runtime.abort("s") is Receipt.STALE
    assert await runtime.abort("s", turn=turn.id) is Receipt.STALE


async def test_pending_permission_is_cancelled_and_a_later_approval_refused(
    sink: MemorySink, tmp_path: Path
) -> None:
    runtime = Runtime(LocalHost(), grace_s=GRACE, sink=sink, ask_permission=ask_for("Write"))
    target = tmp_path / "never.txt"
    turn = runtime.start_turn("s")
    call = turn.request("Write", {"path": str(target), "content": "x"})
    await until(lambda: sink.of(names.PERMISSION_REQUESTED), what="the prompt")

    await runtime.abort("s")

    assert runtime.answer_permission("s", call.call_id, approved=True) is Answer.LATE
    # A wrongly approved Write would start in its lifecycle task: wait until that task is over.
    await until(lambda: task_done(f"call {call.call_id}"), what="the call's task to end")
    assert not target.exists()
    assert sink.of(names.PERMISSION_CANCELLED, call=call.call_id)
    assert sink.of(names.PERMISSION_LATE, call=call.call_id)
    assert sink.of(names.TOOL_STARTED, call=call.call_id) == []
    assert (await call.result()).error_code == names.TOOL_ABORTED
    assert check_invariants(sink) == []


async def test_an_approval_asked_for_after_the_stop_is_refused(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    """A framework that asks its user after the stop reached the turn (its request was on its
    way): the call is refused, and an approval sent for it later is late, not unknown."""
    turn = runtime.start_turn("s")
    slow = turn.request("Bash", {"command": "sleep 30"})
    await until(lambda: sink.of(names.TOOL_STARTED), what="the command")
    stop = asyncio.ensure_future(runtime.abort("s"))
    await until(lambda: turn.stopping, what="the stop")
    asked = turn.request(
        "Write", {"path": str(tmp_path / "x"), "content": "x"}, ask_permission=True
    )
    await stop
    assert (await asked.result()).outcome is Outcome.REFUSED
    assert runtime.answer_permission("s", asked.call_id, True) is Answer.LATE
    assert sink.of(names.PERMISSION_LATE, call=asked.call_id)
    assert sink.of(names.TOOL_STARTED, call=asked.call_id) == []
    assert not (tmp_path / "x").exists()
    assert (await slow.result()).outcome is Outcome.ABORTED
    assert check_invariants(sink) == []


async def test_permission_granted_and_denied(sink: MemorySink, tmp_path: Path) -> None:
    runtime = Runtime(LocalHost(), grace_s=GRACE, sink=sink, ask_permission=ask_for("Write"))
    turn = runtime.start_turn("s")
    yes = turn.request("Write", {"path": str(tmp_path / "y"), "content": "y"})
    no = turn.request("Write", {"path": str(tmp_path / "n"), "content": "n"})
    await until(lambda: len(sink.of(names.PERMISSION_REQUESTED)) == 2, what="two prompts")
    assert runtime.answer_permission("s", yes.call_id, True) is Answer.GRANTED
    assert runtime.answer_permission("s", no.call_id, False) is Answer.DENIED
    assert (await yes.result()).outcome is Outcome.COMPLETED
    assert (await no.result()).outcome is Outcome.DENIED
    assert (tmp_path / "y").read_text() == "y"
    assert not (tmp_path / "n").exists()


async def test_queued_call_stopped_never_starts(
    sink: MemorySink, fifo: Path, tmp_path: Path
) -> None:
    runtime = Runtime(LocalHost(), grace_s=GRACE, sink=sink, max_running=1)
    turn = runtime.start_turn("s")
    turn.request("Read", {"path": str(fifo)})  # holds the only slot
    marker = tmp_path / "ran"
    queued = turn.request("Bash", {"command": f"touch {marker}"})
    await until(lambda: sink.of(names.TOOL_STARTED), what="the first call")
    assert queued.state == "queued"

    await runtime.abort("s")

    assert (await queued.result()).error_code == names.TOOL_ABORTED
    assert sink.of(names.TOOL_STARTED, call=queued.call_id) == []
    assert not marker.exists()


async def test_request_after_the_stop_is_refused(
    runtime: Runtime, sink: MemorySink, fifo: Path
) -> None:
    turn = runtime.start_turn("s")
    turn.request("Read", {"path": str(fifo)})
    await runtime.abort("s")
    late = turn.request("Bash", {"command": "true"})
    result = await late.result()
    assert result.outcome is Outcome.REFUSED
    assert result.error_code == names.TOOL_ABORTED
    assert sink.of(names.TOOL_REFUSED, call=late.call_id)


async def test_early_abort_means_the_bash_never_starts(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    turn = runtime.start_turn("s")
    marker = tmp_path / "ran"
    runtime.abort_call("s", turn.id, "c-early", "Bash")
    call = turn.request("Bash", {"command": f"touch {marker}"}, call_id="c-early")
    assert (await call.result()).outcome is Outcome.REFUSED
    assert not marker.exists()
    assert sink.of(names.TOOL_STARTED) == []


async def test_early_abort_for_another_tool_is_not_inherited(
    runtime: Runtime, tmp_path: Path
) -> None:
    turn = runtime.start_turn("s")
    runtime.abort_call("s", turn.id, "c-1", "Grep")
    out = tmp_path / "ok"
    result = await turn.request("Bash", {"command": f"touch {out}"}, call_id="c-1").result()
    assert result.outcome is Outcome.COMPLETED
    assert out.exists()


async def test_host_abort_before_execute_never_starts_the_process(tmp_path: Path) -> None:
    host = LocalHost()
    marker = tmp_path / "ran"
    host.abort(AbortRequest("s", "t", "c", "Bash", StopSource.UI, GRACE))
    req = ExecuteRequest("s", "t", "c", "Bash", ToolClass.PROCESS, {"command": f"touch {marker}"})
    result = await host.execute(req, lambda _m: None)
    assert result.status is HostStatus.ABORTED
    assert not marker.exists()
    # Another session's call with the same id and tool is untouched.
    other = ExecuteRequest("s2", "t", "c", "Bash", ToolClass.PROCESS, {"command": "true"})
    assert (await host.execute(other, lambda _m: None)).status is HostStatus.OK


async def test_call_ids_are_never_reused_in_a_session(runtime: Runtime) -> None:
    turn = runtime.start_turn("s")
    turn.request("Glob", {"pattern": "*"}, call_id="c-1")
    await turn.finish()
    nxt = runtime.start_turn("s")
    with pytest.raises(CallIdReusedError, match="c-1"):
        nxt.request("Glob", {"pattern": "*"}, call_id="c-1")
    generated = {nxt.request("Glob", {"pattern": "*"}).call_id for _ in range(3)}
    assert len(generated) == 3
    assert not generated & set(turn.calls)


async def test_legacy_mode_reproduces_the_field_report(sink: MemorySink, fifo: Path) -> None:
    runtime = Runtime(LocalHost(), mode=Mode.LEGACY, grace_s=GRACE, sink=sink)
    turn = runtime.start_turn("s")
    grep = turn.request("Grep", {"pattern": "late", "path": str(fifo)})
    await until(lambda: sink.of(names.TOOL_STARTED), what="Grep started")
    stop = asyncio.ensure_future(runtime.abort("s"))
    await asyncio.sleep(0.3)
    assert not stop.done(), "legacy: the stop must wait for the Grep"
    assert runtime.session("s").processing
    await release_when_read(fifo)  # the Grep finally returns ...
    assert await stop is Receipt.ACCEPTED  # ... and the abort applies only then
    kinds = sink.kinds(session="s")
    assert kinds.index(names.TOOL_FINISHED) < kinds.index(names.TURN_SETTLED)
    # The stop never reached the Grep at all: it simply completed, minutes later in the field.
    assert (await grep.result()).outcome is Outcome.COMPLETED


async def test_watchdog_stop_walks_a_pinned_legacy_turn(sink: MemorySink, fifo: Path) -> None:
    runtime = Runtime(LocalHost(), mode=Mode.LEGACY, grace_s=GRACE, sink=sink)
    turn = runtime.start_turn("s")
    turn.request("Grep", {"pattern": "x", "path": str(fifo)})
    await until(lambda: sink.of(names.TOOL_STARTED), what="Grep started")
    user_stop = asyncio.ensure_future(runtime.abort("s"))
    await until(lambda: sink.of(names.ABORT_RPC_RECEIVED), what="the user's stop")
    assert await runtime.abort("s", source="watchdog") is Receipt.JOINED
    assert await user_stop is Receipt.ACCEPTED
    assert not runtime.session("s").processing
    assert sink.of(names.TOOL_RESULT_DISCARDED)


async def test_abandon_all_breaks_invariant_one(sink: MemorySink, tmp_path: Path) -> None:
    runtime = Runtime(
        LocalHost(),
        mode=Mode.ABANDON_ALL,
        grace_s=GRACE,
        sink=sink,
        ask_permission=ask_for("Write"),
    )
    turn = runtime.start_turn("s")
    call = turn.request("Write", {"path": str(tmp_path / "w"), "content": "x"})
    await until(lambda: sink.of(names.PERMISSION_REQUESTED), what="the prompt")
    await runtime.abort("s")
    # The rejected alternative: the prompt stayed open and its approval is accepted.
    assert runtime.answer_permission("s", call.call_id, True) is Answer.GRANTED
    await until(lambda: (tmp_path / "w").exists(), what="the late Write")
    assert {v.invariant for v in check_invariants(sink)} >= {1}


async def test_bad_input_names_what_is_valid(runtime: Runtime) -> None:
    runtime.start_turn("alpha")
    with pytest.raises(UnknownSessionError, match="alpha"):
        await runtime.abort("alpah")
    with pytest.raises(UnknownTurnError, match=r"alpha\.t1"):
        await runtime.abort("alpha", turn="nope")
    with pytest.raises(ValueError, match="ui, keyboard, api, cli, watchdog"):
        await runtime.abort("alpha", source="mouse")


async def test_a_failing_stop_callback_does_not_stop_the_stop(
    runtime: Runtime, sink: MemorySink, fifo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A framework's cancel hook that raises is logged; the walk and settlement go on."""
    turn = runtime.start_turn("s")
    called: list[str] = []
    turn.on_stop.append(lambda: 1 / 0)
    turn.on_stop.append(lambda: called.append("second"))
    read = turn.request("Read", {"path": str(fifo)})
    await until(lambda: sink.of(names.TOOL_STARTED), what="the read")
    assert await runtime.abort("s") is Receipt.ACCEPTED
    assert called == ["second"]
    assert (await read.result()).outcome is Outcome.DISCARDED
    assert "a stop callback of turn" in caplog.text
    assert check_invariants(list(sink)) == []


async def test_a_call_can_ask_for_permission_whatever_the_runtime_says(
    runtime: Runtime, sink: MemorySink
) -> None:
    turn = runtime.start_turn("s")
    write = turn.request("Write", {"path": "/nonexistent/x", "content": ""}, ask_permission=True)
    await sink.wait_for(names.PERMISSION_REQUESTED, call=write.call_id)
    assert runtime.answer_permission("s", write.call_id, False) is Answer.DENIED
    assert (await write.result()).outcome is Outcome.DENIED


async def test_calls_stopped_in_the_tick_they_were_requested_never_start(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    """The agent loop asks, and Stop lands before the loop runs again: a call admitted at once
    is scheduled, not started, so none of them starts (a Write that started would write)."""
    turn = runtime.start_turn("s")
    target = tmp_path / "never.txt"
    calls = [
        turn.request("Write", {"path": str(target), "content": "x"}),
        turn.request("Read", {"path": str(tmp_path / "missing")}),
        turn.request("Bash", {"command": f"touch {tmp_path / 'never-ran'}"}),
    ]
    assert await runtime.abort("s") is Receipt.ACCEPTED
    assert sink.of(names.TOOL_STARTED) == []
    assert [(await c.result()).outcome for c in calls] == [Outcome.ABORTED] * 3
    # Every execution the three calls had scheduled has run its course.
    await until(lambda: asyncio.all_tasks() == {asyncio.current_task()}, what="the executions")
    assert not target.exists()
    assert not (tmp_path / "never-ran").exists()
    assert sink.of(names.TOOL_STARTED) == []
    assert check_invariants(sink.events) == []
