"""The OpenAI Agents SDK, native and wrapped, side by side: the same tools, the same stop, real
processes and files.

The model is the SDK's own ``agents.testing.ScriptedModel``. Native, ``cancel("immediate")`` of a
streamed run ends the stream at once while the tool's process, thread or write goes on; wrapped,
``rt.abort()`` returns once each call is released under its policy, and every invariant holds.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import warnings
from pathlib import Path
from typing import Any

import psutil
import pytest
from agents import (
    Agent,
    ApplyPatchTool,
    ComputerTool,
    CustomTool,
    Runner,
    WebSearchTool,
    function_tool,
    set_tracing_disabled,
)
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from tests.conftest import release_when_read, until
from tests.integrations.pai_parts import (
    CHUNK,
    CHUNKS,
    TERM_IGNORING_TREE,
    begun,
    marked_alive,
    write_in_chunks,
)
from tests.integrations.verdicts import no_violations, outcomes
from turnwatch import names
from turnwatch.integrations.openai_agents import (
    FunctionSpans,
    RunStopped,
    StoppableRunner,
    ToolClassError,
    UnwrappedToolWarning,
    run_command,
    tool_class,
)
from turnwatch.runtime import MemorySink, Receipt, Runtime

set_tracing_disabled(True)  # the SDK's own tracing would try to export to its platform


def scripted(*calls: tuple[str, dict[str, Any], str]) -> ScriptedModel:
    """A model that asks for ``calls`` in one step, then says it is done."""
    return ScriptedModel(
        [
            ModelStep(output=[function_call(n, a, call_id=c) for n, a, c in calls]),
            ModelStep(output=[assistant_message("done")]),
        ]
    )


async def consume(result: Any) -> None:
    async for _ev in result.stream_events():
        pass


# --- a process tool: a TERM-ignoring tree ---


async def test_native_a_cancelled_run_leaves_the_process_running() -> None:
    pids: list[int] = []

    @function_tool
    def sh() -> str:
        """Run a command."""
        proc = subprocess.Popen(["bash", "-c", TERM_IGNORING_TREE])
        pids.append(proc.pid)
        proc.wait()
        return "done"

    agent = Agent(name="a", model=scripted(("sh", {}, "p1")), tools=[sh])
    result = Runner.run_streamed(agent, "go")
    task = asyncio.ensure_future(consume(result))
    await until(lambda: pids, what="the tree to start")
    result.cancel("immediate")
    try:
        await asyncio.wait_for(task, 5)
        # The stream ended at once, the call gone from its items; the tree runs on.
        assert psutil.pid_exists(pids[0])
        assert psutil.Process(pids[0]).status() != psutil.STATUS_ZOMBIE
        assert not result.new_items
    finally:
        for p in [psutil.Process(pids[0]), *psutil.Process(pids[0]).children(recursive=True)]:
            p.kill()


async def test_wrapped_a_stopped_process_tool_ends_within_its_grace(
    runtime: Runtime, sink: MemorySink
) -> None:
    @function_tool
    async def sh() -> str:
        """Run a command."""
        return (await run_command(["bash", "-c", TERM_IGNORING_TREE])).output

    agent = Agent(name="a", model=scripted(("sh", {}, "p1")), tools=[tool_class(sh, "process")])
    run = asyncio.ensure_future(StoppableRunner(agent, runtime).run("go", session="s"))
    await sink.wait_for(names.TOOL_STARTED)
    await until(lambda: len(marked_alive()) >= 3, what="the tree to start")
    assert await runtime.abort("s") is Receipt.ACCEPTED
    assert marked_alive() == []  # abort() returned: nothing of the call outlived the window
    with pytest.raises(RunStopped):
        await run
    assert outcomes(sink) == {"p1": "aborted"}
    no_violations(sink)


# --- a mutating tool: a large write ---


async def test_native_a_cancelled_write_is_left_half_done(tmp_path: Path) -> None:
    target = tmp_path / "big"
    write = function_tool(write_in_chunks, name_override="write")
    agent = Agent(name="a", model=scripted(("write", {"path": str(target)}, "w1")), tools=[write])
    result = Runner.run_streamed(agent, "go")
    task = asyncio.ensure_future(consume(result))
    await until(lambda: begun(target), what="the write to begin")
    result.cancel("immediate")
    await asyncio.wait_for(task, 5)
    assert 0 < target.stat().st_size < CHUNKS * len(CHUNK)


async def test_wrapped_a_stopped_write_is_awaited_to_its_end(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target = tmp_path / "big"
    write = function_tool(write_in_chunks, name_override="write")  # unclassified: mutating
    agent = Agent(name="a", model=scripted(("write", {"path": str(target)}, "w1")), tools=[write])
    run = asyncio.ensure_future(StoppableRunner(agent, runtime).run("go", session="s"))
    await until(lambda: begun(target), what="the write to begin")
    assert await runtime.abort("s") is Receipt.ACCEPTED
    assert target.stat().st_size == CHUNKS * len(CHUNK)  # settled only once it was whole
    with pytest.raises(RunStopped):
        await run
    kinds = [e.kind for e in sink]
    assert kinds.index(names.TOOL_FINISHED) < kinds.index(names.TURN_SETTLED)
    assert outcomes(sink) == {"w1": "completed_after_stop"}
    no_violations(sink)


# --- a read-only sync tool blocked on a pipe (the SDK runs it with asyncio.to_thread) ---


async def test_wrapped_a_stopped_sync_read_is_discarded_in_a_daemon_thread(
    runtime: Runtime, sink: MemorySink, fifo: Path
) -> None:
    workers: list[threading.Thread] = []

    @function_tool
    def read(path: str) -> str:
        """Read a file."""
        workers.append(threading.current_thread())
        with open(path) as f:  # blocks until someone writes: a hung mount
            return f.read()

    agent = Agent(name="a", model=scripted(("read", {"path": str(fifo)}, "r1")), tools=[read])
    runner = StoppableRunner(agent, runtime, classes={"read": "read_only"})
    run = asyncio.ensure_future(runner.run("go", session="s"))
    await until(lambda: workers, what="the read to start")
    assert await runtime.abort("s") is Receipt.ACCEPTED
    with pytest.raises(RunStopped):
        await run
    assert outcomes(sink) == {"r1": "discarded"}
    # Still blocked, and abandoned: a daemon thread, which the interpreter does not wait for.
    assert workers[0].is_alive()
    assert workers[0].daemon
    no_violations(sink)
    await release_when_read(fifo)


# --- the SDK's own cancel runs the same walk ---


async def test_the_sdk_s_own_cancel_is_the_same_stop(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target = tmp_path / "big"
    write = function_tool(write_in_chunks, name_override="write")
    agent = Agent(name="a", model=scripted(("write", {"path": str(target)}, "w1")), tools=[write])
    runner = StoppableRunner(agent, runtime)
    original = Runner.run_streamed
    results: list[Any] = []

    def keep(*a: Any, **kw: Any) -> Any:
        results.append(original(*a, **kw))
        return results[-1]

    Runner.run_streamed = keep  # type: ignore[method-assign]
    try:
        run = asyncio.ensure_future(runner.run("go", session="s"))
        await until(lambda: begun(target), what="the write to begin")
        results[0].cancel("immediate")  # the SDK's cancel, not turnwatch's
        with pytest.raises(RunStopped):
            await run
    finally:
        Runner.run_streamed = original  # type: ignore[method-assign]
    assert target.stat().st_size == CHUNKS * len(CHUNK)
    assert outcomes(sink) == {"w1": "completed_after_stop"}
    no_violations(sink)


# --- approvals ---


def approval_agent(target: Path, ran: list[str]) -> Agent[Any]:
    """An agent whose model asks once to write ``target`` (call ``w1``), with a write that needs
    the user's approval; each path it wrote goes to ``ran``."""

    @function_tool(needs_approval=True)
    def write(path: str) -> str:
        """Write a file."""
        ran.append(path)
        Path(path).write_text("x")
        return "written"

    return Agent(name="a", model=scripted(("write", {"path": str(target)}, "w1")), tools=[write])


async def approved_after_the_stop(
    runner: StoppableRunner, runtime: Runtime, sink: MemorySink
) -> None:
    """A run of session ``s`` that ends asking one approval; the stop, the user's approval of
    the prompt it closed, and the run resumed with it: the approval is recorded late."""
    result = await runner.run("go", session="s")
    (item,) = result.interruptions
    await sink.wait_for(names.PERMISSION_REQUESTED)
    assert await runtime.abort("s") is Receipt.ACCEPTED  # the prompt closes with the stop
    state = result.to_state()
    state.approve(item)  # the user clicks "approve" on a prompt the stop already closed
    await runner.run(state, session="s")
    assert names.PERMISSION_LATE in [e.kind for e in sink]


async def approved_in_time(runner: StoppableRunner) -> Any:
    """A run of session ``s`` that ends asking one approval, resumed with it given: its result."""
    result = await runner.run("go", session="s")
    state = result.to_state()
    state.approve(result.interruptions[0])
    return await runner.run(state, session="s")


async def test_an_approval_given_after_the_stop_is_refused_and_recorded_late(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target = tmp_path / "f"
    ran: list[str] = []
    await approved_after_the_stop(
        StoppableRunner(approval_agent(target, ran), runtime), runtime, sink
    )
    assert ran == []  # it never ran
    assert not target.exists()
    no_violations(sink)


async def test_an_approval_before_any_stop_runs_the_call(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target = tmp_path / "f"
    agent = approval_agent(target, [])
    runner = StoppableRunner(agent, runtime)
    result = await runner.run("go", session="s")
    state = result.to_state()
    state.approve(result.interruptions[0])
    final = await runner.run(state, session="s")
    assert final.final_output == "done"
    assert target.read_text() == "x"
    assert outcomes(sink) == {"w1": "completed"}
    no_violations(sink)


def test_classes_naming_a_tool_the_agent_lacks_is_an_error(runtime: Runtime) -> None:
    agent = Agent(name="a", model=scripted(), tools=[])
    with pytest.raises(ToolClassError, match="does not have"):
        StoppableRunner(agent, runtime, classes={"nope": "process"})
    with pytest.raises(ToolClassError, match="not a tool class"):
        StoppableRunner(agent, runtime, default_class="sometimes")


# --- tracing: turnwatch's spans carry the SDK trace's id ---


async def test_the_stop_and_its_calls_join_the_sdk_s_trace() -> None:
    from agents import set_trace_processors
    from agents.tracing import Trace, TracingProcessor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.integrations.pai_parts import wait_forever
    from turnwatch.runtime import LocalHost
    from turnwatch.tracing.spans import SpanBuilder

    traces: list[str] = []

    class Seen(TracingProcessor):  # the SDK's traces, recorded here instead of exported
        def on_trace_start(self, trace: Trace) -> None:
            traces.append(trace.trace_id)

        def on_trace_end(self, trace: Trace) -> None: ...
        def on_span_start(self, span: Any) -> None: ...
        def on_span_end(self, span: Any) -> None: ...
        def shutdown(self) -> None: ...
        def force_flush(self) -> None: ...

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = SpanBuilder(provider.get_tracer("turnwatch"))
    sink = MemorySink()
    rt = Runtime(LocalHost(), grace_s=0.6, sink=lambda ev: sink(spans(ev)))
    wait = function_tool(wait_forever, name_override="wait")
    agent = Agent(name="a", model=scripted(("wait", {}, "t1")), tools=[wait])
    set_trace_processors([Seen(), FunctionSpans(provider.get_tracer("sdk"))])
    set_tracing_disabled(False)
    try:
        runner = StoppableRunner(agent, rt, classes={"wait": "read_only"})
        run = asyncio.ensure_future(runner.run("go", session="s"))
        await sink.wait_for(names.TOOL_STARTED)
        await rt.abort("s")
        with pytest.raises(RunStopped):
            await run
    finally:
        set_tracing_disabled(True)
        set_trace_processors([])
    (sdk_trace,) = traces
    want = int(sdk_trace.removeprefix("trace_"), 16)
    by_name = {sp.name: sp for sp in exporter.get_finished_spans()}
    assert by_name[names.SPAN_STOP].context.trace_id == want
    assert by_name["execute_tool wait"].context.trace_id == want
    # The SDK's own function span, converted, in the same trace beside the stop.
    sdk = by_name["openai_agents.function wait"]
    assert sdk.context.trace_id == want
    stop_parent = by_name[names.SPAN_STOP].parent
    assert sdk.parent is not None
    assert stop_parent is not None
    assert sdk.parent.span_id == stop_parent.span_id
    assert str((sdk.attributes or {})[names.A_SDK_SPAN_ID]).startswith("span_")
    assert sdk.start_time is not None
    assert sdk.end_time is not None
    call = by_name["execute_tool wait"]
    assert call.start_time is not None
    assert abs(sdk.start_time - call.start_time) < 1e9  # the same call, as each side saw it


def test_a_failed_sdk_function_span_is_an_error_and_keeps_no_input() -> None:
    from agents import set_trace_processors
    from agents.tracing import SpanError, function_span
    from agents.tracing import trace as sdk_trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    set_trace_processors([FunctionSpans(provider.get_tracer("sdk"))])
    set_tracing_disabled(False)
    try:
        with sdk_trace("run") as t, function_span("deploy", input='{"token": "s3cret"}') as sp:
            sp.set_error(SpanError(message="deploy failed", data=None))
    finally:
        set_tracing_disabled(True)
        set_trace_processors([])
    (span,) = exporter.get_finished_spans()
    assert span.name == "openai_agents.function deploy"
    assert span.context.trace_id == int(t.trace_id.removeprefix("trace_"), 16)
    assert span.status.status_code.name == "ERROR"
    assert span.status.description == "deploy failed"
    assert "s3cret" not in str(dict(span.attributes or {}))


def test_every_local_tool_is_wrapped_and_none_named_unreached(runtime: Runtime) -> None:
    """The SDK's local tools of every kind (apply-patch, custom, computer) are wrapped, each a
    class of its own; none is named unwrapped (the computer tool was, until it was wrapped),
    and a hosted tool, which runs on the provider's side, is left to it."""

    class Editor:
        def create_file(self, operation: Any) -> None: ...
        def update_file(self, operation: Any) -> None: ...
        def delete_file(self, operation: Any) -> None: ...

    async def grammar(ctx: Any, text: str) -> str:
        return text

    tools: list[Any] = [
        ApplyPatchTool(editor=Editor()),
        CustomTool(name="sql", description="Run SQL.", on_invoke_tool=grammar),
        ComputerTool(computer=object()),  # never used: the model asks for nothing
        WebSearchTool(),
    ]
    agent = Agent(name="a", model=scripted(), tools=tools)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnwrappedToolWarning)
        runner = StoppableRunner(agent, runtime)
    assert sorted(runner.classes) == ["apply_patch", "computer_use_preview", "sql"]
