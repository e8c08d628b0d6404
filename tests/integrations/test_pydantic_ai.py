"""pydantic-ai, native and wrapped, side by side: the same tools, the same stop, real processes.

The model is pydantic-ai's own ``FunctionModel`` scripting the tool calls; the tools do real
things (a TERM-ignoring process tree, a write in chunks, a read that blocks on a pipe). Native, a
stop through the framework's ``CancellationToken`` leaves the process and the thread running and
the write half done; wrapped, ``rt.abort()`` returns once each call is released under its
policy, and every invariant holds (``check_invariants`` plus ``/proc``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent, CancellationToken, DeferredToolRequests
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.messages import (
    ToolCallPart,
)
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

from tests.conftest import GRACE, release_when_read, until
from tests.integrations.pai_parts import (
    CHUNK,
    CHUNKS,
    TERM_IGNORING_TREE,
    approval_agent,
    approve,
    begun,
    calls,
    marked_alive,
    wait_forever,
    write_in_chunks,
)
from tests.integrations.verdicts import no_violations, outcomes
from turnwatch import names
from turnwatch.integrations.pydantic_ai import (
    STOPPED,
    StoppableAgent,
    ToolClassError,
    run_command,
)
from turnwatch.runtime import FanOut, LocalHost, MemorySink, Receipt, Runtime
from turnwatch.runtime.model import RecoveryResult
from turnwatch.tracing.ledger import Ledger
from turnwatch.tracing.spans import SpanBuilder
from turnwatch.watchdog.loop import Watchdog
from turnwatch.watchdog.scan import Config


@pytest.fixture
def rt(runtime: Runtime) -> Runtime:
    """The shared runtime (grace window GRACE, recording into ``sink``)."""
    return runtime


# --- a process tool: a TERM-ignoring tree ---


async def test_native_a_stopped_process_tool_lives_on(tmp_path: Path) -> None:
    pids: list[int] = []
    agent = Agent(FunctionModel(calls(ToolCallPart("sh", {}, tool_call_id="p1"))))

    @agent.tool_plain
    def sh() -> str:
        proc = subprocess.Popen(["bash", "-c", TERM_IGNORING_TREE])
        pids.append(proc.pid)
        proc.wait()
        return "done"

    token = CancellationToken()
    run = asyncio.ensure_future(agent.run("go", cancellation_token=token))
    await until(lambda: pids, what="the tree to start")
    token.cancel()
    try:
        with pytest.raises(RunCancelled):
            await run
        # The run says it was cancelled; the tree and the tool's thread run on.
        assert psutil.pid_exists(pids[0])
        assert psutil.Process(pids[0]).status() != psutil.STATUS_ZOMBIE
        assert any(t.name.startswith("AnyIO worker") for t in threading.enumerate())
    finally:
        for p in [psutil.Process(pids[0]), *psutil.Process(pids[0]).children(recursive=True)]:
            p.kill()


async def test_wrapped_a_stopped_process_tool_ends_within_its_grace(
    rt: Runtime, sink: MemorySink
) -> None:
    agent = Agent(FunctionModel(calls(ToolCallPart("sh", {}, tool_call_id="p1"))))

    @agent.tool_plain(metadata={"turnwatch_class": "process"})
    async def sh() -> str:
        return (await run_command(["bash", "-c", TERM_IGNORING_TREE])).output

    run = asyncio.ensure_future(StoppableAgent(agent, rt).run("go", session="s"))
    await until(lambda: len(marked_alive()) >= 3, what="the tree to start")
    # The call's start (no process), then its command's, which names the process.
    started = [e for e in sink if e.kind == names.TOOL_STARTED][-1]
    assert await rt.abort("s") is Receipt.ACCEPTED
    # abort() returned: nothing of the call outlived the grace window.
    assert marked_alive() == []
    assert not psutil.pid_exists(int(started.attrs["pid"])) or (
        psutil.Process(int(started.attrs["pid"])).status() == psutil.STATUS_ZOMBIE
    )
    with pytest.raises(RunCancelled):
        await run
    assert outcomes(sink) == {"p1": "aborted"}
    no_violations(sink)


# --- a mutating tool: a large write ---


async def test_native_a_stopped_write_is_left_half_done(tmp_path: Path) -> None:
    target = tmp_path / "big"
    agent = Agent(FunctionModel(calls(ToolCallPart("write", {"path": str(target)}, "w1"))))
    agent.tool_plain(name="write")(write_in_chunks)
    token = CancellationToken()
    run = asyncio.ensure_future(agent.run("go", cancellation_token=token))
    await until(lambda: begun(target), what="the write to begin")
    token.cancel()
    with pytest.raises(RunCancelled):
        await run
    assert 0 < target.stat().st_size < CHUNKS * len(CHUNK)


async def test_wrapped_a_stopped_write_is_awaited_to_its_end(
    rt: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target = tmp_path / "big"
    agent = Agent(FunctionModel(calls(ToolCallPart("write", {"path": str(target)}, "w1"))))
    agent.tool_plain(name="write")(write_in_chunks)  # no metadata: mutating by default
    run = asyncio.ensure_future(StoppableAgent(agent, rt).run("go", session="s"))
    await until(lambda: begun(target), what="the write to begin")
    assert await rt.abort("s") is Receipt.ACCEPTED
    # Settled only once the write was whole.
    assert target.stat().st_size == CHUNKS * len(CHUNK)
    with pytest.raises(RunCancelled):
        await run
    kinds = [e.kind for e in sink]
    assert kinds.index(names.TOOL_FINISHED) < kinds.index(names.TURN_SETTLED)
    assert outcomes(sink) == {"w1": "completed_after_stop"}
    no_violations(sink)


# --- a read-only sync tool blocked on a pipe ---


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "hung.fifo"
    os.mkfifo(path)
    yield path
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    os.close(fd)


async def test_wrapped_a_stopped_sync_read_is_discarded_and_cannot_hold_the_exit(
    rt: Runtime, sink: MemorySink, fifo: Path
) -> None:
    agent = Agent(FunctionModel(calls(ToolCallPart("read", {"path": str(fifo)}, "r1"))))
    workers: list[threading.Thread] = []

    @agent.tool_plain(metadata={"turnwatch_class": "read_only"})
    def read(path: str) -> str:
        workers.append(threading.current_thread())
        with open(path) as f:  # blocks until someone writes: a hung mount
            return f.read()

    run = asyncio.ensure_future(StoppableAgent(agent, rt).run("go", session="s"))
    await until(lambda: workers, what="the read to start")
    assert await rt.abort("s") is Receipt.ACCEPTED
    with pytest.raises(RunCancelled):
        await run
    assert outcomes(sink) == {"r1": "discarded"}
    # Still blocked, and abandoned: a daemon thread, which the interpreter does not wait for.
    assert workers[0].is_alive()
    assert workers[0].daemon
    no_violations(sink)
    await release_when_read(fifo)


# --- approvals ---


async def test_an_approval_given_after_the_stop_is_refused(
    rt: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target = tmp_path / "keep-me"
    target.write_text("precious")
    agent, seen = approval_agent(target)
    wrapped = StoppableAgent(agent, rt)
    first = await wrapped.run("clean up", session="s")
    assert isinstance(first.output, DeferredToolRequests)
    assert rt.sessions["s"].processing  # the prompt keeps the turn live
    await sink.wait_for(names.PERMISSION_REQUESTED)

    assert await rt.abort("s") is Receipt.ACCEPTED
    assert sink.kinds(call="a1")[-2:] == [names.PERMISSION_CANCELLED, names.TOOL_FINISHED]

    second = await approve(wrapped, first)  # on the prompt that was still on screen
    assert second.output == "ok"
    assert seen == [STOPPED]  # the model was told, and the file was never touched
    assert target.read_text() == "precious"
    assert names.PERMISSION_LATE in sink.kinds(call="a1")
    no_violations(sink)


@pytest.mark.parametrize(
    ("approved", "told", "kept", "answer"),
    [
        (True, "deleted", False, names.PERMISSION_GRANTED),
        (False, "The tool call was denied.", True, names.PERMISSION_DENIED),
    ],
)
async def test_an_answer_before_any_stop_is_the_frameworks(
    rt: Runtime,
    sink: MemorySink,
    tmp_path: Path,
    approved: bool,
    told: str,
    kept: bool,
    answer: str,
) -> None:
    target = tmp_path / "old-file"
    target.write_text("old")
    agent, seen = approval_agent(target)
    wrapped = StoppableAgent(agent, rt)
    second = await approve(wrapped, await wrapped.run("clean up", session="s"), approved)
    assert (second.output, seen, target.exists()) == ("ok", [told], kept)
    assert sink.kinds(call="a1")[:3] == [names.TOOL_REQUESTED, names.PERMISSION_REQUESTED, answer]
    assert outcomes(sink) == {"a1": "completed" if approved else "denied"}
    assert not rt.sessions["s"].processing
    assert wrapped.dispatch.slots == {}  # nothing held for a call that ran or never will
    no_violations(sink)


# --- receipts, late calls, bad input ---


async def test_receipts_repeated_and_late_stops(rt: Runtime, sink: MemorySink) -> None:
    agent = Agent(FunctionModel(calls(ToolCallPart("wait", {}, "x1"))))

    agent.tool_plain(name="wait", metadata={"turnwatch_class": "read_only"})(wait_forever)
    run = asyncio.ensure_future(StoppableAgent(agent, rt).run("go", session="s"))
    await sink.wait_for(names.TOOL_STARTED)
    receipts = await asyncio.gather(*(rt.abort("s") for _ in range(6)))  # six clicks
    assert sorted(receipts) == sorted([Receipt.ACCEPTED] + [Receipt.JOINED] * 5)
    with pytest.raises(RunCancelled):
        await run
    assert await rt.abort("s") is Receipt.ALREADY_SETTLED  # a seventh click, after it all
    no_violations(sink)


async def test_a_completed_run_settles_its_turn(rt: Runtime, sink: MemorySink) -> None:
    agent = Agent(FunctionModel(calls(ToolCallPart("add", {"a": 1, "b": 2}, "k1"))))

    @agent.tool_plain(metadata={"turnwatch_class": "read_only"})
    def add(a: int, b: int) -> int:
        return a + b

    result = await StoppableAgent(agent, rt).run("go", session="s")
    assert result.output == "[3]"  # the framework got the tool's own value back
    assert sink.of(names.TURN_SETTLED)[0].attrs["outcome"] == "completed"
    no_violations(sink)


def _sync_tool() -> str:
    return ""


@pytest.mark.parametrize(
    ("name", "metadata", "said"),
    [
        ("look", {"turnwatch_class": "read-only"}, r"'look'.*'read-only'.*read_only, process"),
        ("sh", {"turnwatch_class": "process"}, r"'sh': a process tool must be async.*run_command"),
        ("Bash", None, r"'Bash' is already a tool of this host"),
    ],
)
async def test_what_cannot_be_honoured_is_said_at_construction(
    rt: Runtime, name: str, metadata: dict[str, str] | None, said: str
) -> None:
    """An unknown class, a sync process tool, a name the host's own tool has: at construction,
    naming the tool, not at the first stop."""
    agent = Agent(FunctionModel(calls()))
    agent.tool_plain(name=name, metadata=metadata)(_sync_tool)
    with pytest.raises(ToolClassError, match=said):
        StoppableAgent(agent, rt)


# --- one trace ---


async def test_the_stop_joins_the_runs_trace(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink = MemorySink()
    spans = SpanBuilder(provider.get_tracer("turnwatch"))
    rt = Runtime(LocalHost(), grace_s=GRACE, sink=lambda ev: sink(spans(ev)))
    model = FunctionModel(calls(ToolCallPart("wait", {}, "t1")))
    settings = InstrumentationSettings(tracer_provider=provider)
    agent = Agent(model, capabilities=[Instrumentation(settings=settings)])

    agent.tool_plain(name="wait", metadata={"turnwatch_class": "read_only"})(wait_forever)
    run = asyncio.ensure_future(StoppableAgent(agent, rt).run("go", session="s"))
    await sink.wait_for(names.TOOL_STARTED)
    await rt.abort("s")
    with pytest.raises(RunCancelled):
        await run
    by_name: dict[str, Any] = {sp.name: sp for sp in exporter.get_finished_spans()}
    run_span = next(sp for n, sp in by_name.items() if n.startswith("invoke_agent"))
    stop = by_name[names.SPAN_STOP]
    assert stop.context.trace_id == run_span.context.trace_id
    assert stop.parent is not None
    assert stop.parent.span_id == run_span.context.span_id
    # turnwatch's own execute_tool span for the call is in the run's trace too, not a root.
    ours = [
        sp
        for sp in exporter.get_finished_spans()
        if sp.name == "execute_tool wait"
        and sp.instrumentation_scope is not None
        and sp.instrumentation_scope.name == "turnwatch"
    ]
    assert len(ours) == 1
    assert ours[0].context.trace_id == run_span.context.trace_id


# --- the watchdog sees wrapped sessions as any other ---


async def test_the_watchdog_reports_an_awaited_call_long_after_the_stop_and_never_abandons_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    seen = MemorySink()
    rt = Runtime(LocalHost(), grace_s=0.2, sink=FanOut(ledger, seen))
    release = asyncio.Event()
    agent = Agent(FunctionModel(calls(ToolCallPart("migrate", {}, "m1"))))

    @agent.tool_plain(metadata={"turnwatch_class": "mutating"})
    async def migrate() -> str:
        await release.wait()  # a migration that takes its time, stop or not
        return "migrated"

    run = asyncio.ensure_future(StoppableAgent(agent, rt).run("go", session="s"))
    await seen.wait_for(names.TOOL_STARTED)
    stop = asyncio.ensure_future(rt.abort("s"))
    await asyncio.sleep(0.5)  # past grace + slack: overdue
    ledger.flush()
    cfg = Config(grace_s=0.2, slack_s=0.1)
    dog = Watchdog(path, FanOut(ledger, seen), ledger.flush, cfg=cfg, runtime=rt)
    cycle = await dog.cycle()
    overdue = [a for a in cycle.actions if a.finding.kind == names.F_AWAIT_OVERDUE]
    assert [a.finding.call for a in overdue] == ["m1"]
    assert overdue[0].result is RecoveryResult.REPORT_ONLY
    assert not stop.done()  # reported, never abandoned: the stop still waits for the call

    release.set()
    assert await stop is Receipt.ACCEPTED
    with pytest.raises(RunCancelled):
        await run
    assert outcomes(seen) == {"m1": "completed_after_stop"}
    ledger.flush()
    assert [f.kind for f in (await dog.cycle()).findings] == []
    ledger.close()
    no_violations(seen)
