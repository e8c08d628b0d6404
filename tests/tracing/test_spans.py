"""The span tree of one real stop with a call of each class (in-memory exporter), one
behaviour per test."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from tests.conftest import GRACE
from turnwatch import names
from turnwatch.runtime import (
    CallHandle,
    HostResult,
    HostStatus,
    LocalHost,
    MemorySink,
    Runtime,
    Started,
)
from turnwatch.runtime.events import Event
from turnwatch.runtime.tools.context import ToolContext
from turnwatch.tracing.pipeline import Telemetry
from turnwatch.tracing.spans import SpanBuilder

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def slow_plugin(ctx: ToolContext) -> HostResult:
    """An extension that honours the cancel after a moment (it is awaited, not abandoned)."""
    ctx.notify(Started())
    await ctx.abort_arrived.wait()
    await asyncio.sleep(0.05)
    return HostResult(HostStatus.CANCELLED_BY_SERVER, error="Request cancelled")


@dataclass
class Stop:
    """One real stop of four calls (a call of each class), and every span it made."""

    spans: list[ReadableSpan]
    events: MemorySink
    calls: list[CallHandle]

    def named(self, name: str) -> list[ReadableSpan]:
        return [sp for sp in self.spans if sp.name == name]

    def one(self, name: str) -> ReadableSpan:
        (sp,) = self.named(name)
        return sp

    def executions(self) -> dict[str, ReadableSpan]:
        """The execute_tool spans, by call id."""
        return {
            str(attrs(sp)[names.A_GENAI_TOOL_CALL_ID]): sp
            for sp in self.spans
            if sp.name.startswith(names.SPAN_EXECUTE_TOOL_PREFIX + " ")
        }


def attrs(sp: ReadableSpan) -> Mapping[str, object]:
    return sp.attributes or {}


def ids(sp: ReadableSpan) -> tuple[int, int]:
    assert sp.context is not None
    return sp.context.trace_id, sp.context.span_id


def parent_of(sp: ReadableSpan) -> int:
    assert sp.parent is not None
    return sp.parent.span_id


@pytest.fixture
async def stop(tmp_path: Path, fifo: Path) -> Stop:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink = MemorySink()
    telemetry = Telemetry(spans=SpanBuilder(provider.get_tracer("test")), observers=[sink])
    host = LocalHost()
    host.register("plugin_slow", slow_plugin)
    runtime = Runtime(host, grace_s=GRACE, sink=telemetry)
    turn = runtime.start_turn("s")
    calls = [
        turn.request("Grep", {"pattern": "x", "path": str(fifo)}),
        turn.request("Bash", {"command": "sleep 300"}),
        turn.request("Write", {"path": str(tmp_path / "w"), "content": "x" * (32 << 20)}),
        turn.request("plugin_slow", {}),
    ]
    for h in calls:
        await sink.wait_for(names.TOOL_STARTED, call=h.call_id)
    await sink.wait_for(names.TOOL_PROGRESS, tool="Write")
    await runtime.abort("s", traceparent=TRACEPARENT)
    return Stop(list(exporter.get_finished_spans()), sink, calls)


async def test_the_stop_joins_the_callers_trace(stop: Stop) -> None:
    root = stop.one(names.SPAN_STOP)
    trace_id, span_id = TRACEPARENT.split("-")[1:3]
    assert format(ids(root)[0], "032x") == trace_id
    assert format(parent_of(root), "016x") == span_id


async def test_the_spans_nest_as_the_design_says(stop: Stop) -> None:
    root, agent = stop.one(names.SPAN_STOP), stop.one(names.SPAN_AGENT_ABORT)
    walk, settle = stop.one(names.SPAN_ABORT_WALK), stop.one(names.SPAN_TURN_SETTLE)
    assert parent_of(agent) == ids(root)[1]
    assert parent_of(walk) == ids(agent)[1]
    assert parent_of(settle) == ids(agent)[1]
    assert attrs(settle)[names.A_OUTCOME] == "aborted"


async def test_each_in_flight_call_gets_a_tools_abort_linked_to_its_execution(stop: Stop) -> None:
    walk, execs = stop.one(names.SPAN_ABORT_WALK), stop.executions()
    aborts = stop.named(names.SPAN_TOOLS_ABORT)
    assert sorted(str(attrs(sp)[names.A_GENAI_TOOL_CALL_ID]) for sp in aborts) == sorted(
        h.call_id for h in stop.calls
    )
    policies = {}
    for sp in aborts:
        assert parent_of(sp) == ids(walk)[1]
        (link,) = sp.links
        target = execs[str(attrs(sp)[names.A_GENAI_TOOL_CALL_ID])]
        assert link.context.span_id == ids(target)[1]
        policies[attrs(sp)[names.A_GENAI_TOOL_NAME]] = attrs(sp)[names.A_POLICY]
        assert attrs(sp)[names.A_OUTCOME]
    assert policies == {"Grep": "race", "Bash": "grace", "Write": "await", "plugin_slow": "await"}


async def test_executions_carry_the_genai_attributes(stop: Stop) -> None:
    execs = stop.executions()
    assert sorted(sp.name for sp in execs.values()) == [
        "execute_tool Bash",
        "execute_tool Grep",
        "execute_tool Write",
        "execute_tool plugin_slow",
    ]
    grep, plugin = execs[stop.calls[0].call_id], execs[stop.calls[3].call_id]
    assert attrs(grep)[names.A_GENAI_OPERATION] == "execute_tool"
    assert attrs(grep)[names.A_GENAI_CONVERSATION] == "s"
    assert attrs(grep)[names.A_GENAI_TOOL_TYPE] == "function"
    assert attrs(plugin)[names.A_GENAI_TOOL_TYPE] == "extension"
    assert attrs(execs[stop.calls[1].call_id])[names.A_PROCESS_PID] == stop.calls[1].pid


async def test_an_abort_is_not_an_error(stop: Stop) -> None:
    assert {sp.status.status_code for sp in stop.spans} == {StatusCode.UNSET}


def test_a_failure_is_an_error_to_a_backend() -> None:
    """A tool that fails during its abort: error.type and status ERROR, on both its spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = SpanBuilder(provider.get_tracer("test"))
    t = 1000.0
    for ev in [
        Event(names.TURN_STARTED, "s", t, turn="t"),
        Event(names.TOOL_STARTED, "s", t, turn="t", call="c", tool="Bash"),
        Event(names.ABORT_RPC_RECEIVED, "s", t + 1, turn="t"),
        Event(names.ABORT_WALK_STARTED, "s", t + 1, turn="t", attrs={"inflight": 1}),
        Event(names.TOOLS_ABORT_SENT, "s", t + 1, turn="t", call="c", tool="Bash"),
        Event(
            names.TOOL_FINISHED,
            "s",
            t + 2,
            turn="t",
            call="c",
            tool="Bash",
            attrs={"outcome": "failed", "error": "EPERM"},
        ),
        Event(names.TURN_SETTLED, "s", t + 2, turn="t", attrs={"outcome": "aborted"}),
    ]:
        spans(ev)
    by_name = {sp.name: sp for sp in exporter.get_finished_spans()}
    for name, error in (
        (names.SPAN_TOOLS_ABORT, "tool_failed_during_abort"),
        ("execute_tool Bash", "EPERM"),
    ):
        sp = by_name[name]
        assert sp.status.status_code is StatusCode.ERROR
        assert attrs(sp)[names.A_ERROR_TYPE] == error
    assert by_name[names.SPAN_TURN_SETTLE].status.status_code is StatusCode.UNSET


async def test_ledger_rows_carry_their_spans_ids(stop: Stop) -> None:
    rpc = stop.events.of(names.ABORT_RPC_RECEIVED)[0]
    agent = stop.one(names.SPAN_AGENT_ABORT)
    assert rpc.trace_id == TRACEPARENT.split("-")[1]
    assert rpc.span_id == format(ids(agent)[1], "016x")
