"""The span tree of one stop with a call of each class (in-memory exporter)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from tests.conftest import GRACE, until
from turnwatch import names
from turnwatch.runtime import HostResult, HostStatus, LocalHost, MemorySink, Runtime, Started
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


async def test_stop_trace_shape(tmp_path: Path, fifo: Path) -> None:
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
    await until(lambda: len(sink.of(names.TOOL_STARTED)) == 4, what="four calls started")
    await until(lambda: sink.of(names.TOOL_PROGRESS, tool="Write"), what="the Write running")

    await runtime.abort("s", traceparent=TRACEPARENT)

    spans = exporter.get_finished_spans()
    by_name: dict[str, list] = {}  # type: ignore[type-arg]
    for sp in spans:
        by_name.setdefault(sp.name, []).append(sp)
    (stop,) = by_name["stop"]
    (agent,) = by_name["agent.abort"]
    (walk,) = by_name["abort.walk"]
    (settle,) = by_name["turn.settle"]
    aborts = by_name["tools.abort"]
    # The stop joins the caller's trace (W3C traceparent) ...
    assert format(stop.context.trace_id, "032x") == TRACEPARENT.split("-")[1]
    assert format(stop.parent.span_id, "016x") == TRACEPARENT.split("-")[2]
    # ... and nests as design §5 says.
    assert agent.parent.span_id == stop.context.span_id
    assert walk.parent.span_id == agent.context.span_id
    assert settle.parent.span_id == agent.context.span_id
    assert len(aborts) == len(calls)  # one tools.abort per in-flight call
    exec_spans = {
        sp.attributes[names.A_GENAI_TOOL_CALL_ID]: sp
        for sp in spans
        if sp.name.startswith("execute_tool ")
    }
    assert sorted(sp.name for sp in exec_spans.values()) == [
        "execute_tool Bash",
        "execute_tool Grep",
        "execute_tool Write",
        "execute_tool plugin_slow",
    ]
    for sp in aborts:
        assert sp.parent.span_id == walk.context.span_id
        (link,) = sp.links
        target = exec_spans[sp.attributes[names.A_GENAI_TOOL_CALL_ID]]
        assert link.context.span_id == target.context.span_id
        assert sp.attributes[names.A_POLICY] in {"race", "grace", "await"}
        assert sp.attributes[names.A_OUTCOME]
    grep = exec_spans[calls[0].call_id]
    assert grep.attributes[names.A_GENAI_OPERATION] == "execute_tool"
    assert grep.attributes[names.A_GENAI_CONVERSATION] == "s"
    assert exec_spans[calls[3].call_id].attributes[names.A_GENAI_TOOL_TYPE] == "extension"
    # An abort is not an error.
    assert {sp.status.status_code for sp in spans} == {StatusCode.UNSET}
    assert settle.attributes[names.A_OUTCOME] == "aborted"
    # Ledger rows carry the ids of their spans.
    rpc = sink.of(names.ABORT_RPC_RECEIVED)[0]
    assert rpc.trace_id == TRACEPARENT.split("-")[1]
    assert rpc.span_id == format(agent.context.span_id, "016x")
