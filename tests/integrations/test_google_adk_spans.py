"""Google ADK's own spans and turnwatch's, wrapped: the spans ADK makes of a run and the spans of
its stop are one trace (run in a process of its own, its tracer provider the global one ADK uses).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from turnwatch import names

TRACED = """
import asyncio, json, sys, tempfile
from pathlib import Path
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter, provider = InMemorySpanExporter(), TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # ADK's spans go to the global provider

from tests.integrations.adk_parts import HI, Tools, call, consume, model, new_session
from tests.integrations.adk_parts import says, wrapped
from turnwatch import names
from turnwatch.runtime import FanOut, LocalHost, MemorySink, Runtime
from turnwatch.tracing.ledger import Ledger
from turnwatch.tracing.pipeline import Telemetry
from turnwatch.tracing.spans import SpanBuilder


async def main(tmp):
    ledger = Ledger(tmp / "ledger.sqlite3")
    spans = SpanBuilder(provider.get_tracer("turnwatch"))
    seen = MemorySink()
    rt = Runtime(LocalHost(), grace_s=1.0, sink=FanOut(Telemetry(ledger=ledger, spans=spans), seen))
    runner, app = wrapped(rt, Tools().all[:1], model(says(call("r1", "look", q="x"))))
    sid = await new_session(runner)
    run = asyncio.ensure_future(consume(app.run_async(user_id="u", session_id=sid, new_message=HI)))
    await seen.wait_for(names.TOOL_STARTED)
    await rt.abort(sid)
    await asyncio.wait_for(run, 10)
    ledger.flush(timeout=10)
    ledger.close()
    print(json.dumps([
        {
            "name": s.name,
            "scope": s.instrumentation_scope.name,
            "trace": s.context.trace_id,
            "span": s.context.span_id,
            "parent": s.parent.span_id if s.parent else None,
            "keys": sorted(s.attributes or {}),
        }
        for s in exporter.get_finished_spans()
    ]))


with tempfile.TemporaryDirectory() as d:
    asyncio.run(main(Path(d)))
"""


def test_adks_spans_and_the_stops_are_one_trace() -> None:
    """With no span of the application's around the run, ADK's own spans (invocation, agent,
    tool) are the run's trace: the stop joins it, under the execute_tool span of the call it
    reached. Run in a process of its own: ADK's spans go to the global tracer provider, set
    once per process. Ours carry ids and outcomes, never inputs or outputs."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root}
    out = subprocess.run(
        [sys.executable, "-c", TRACED],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=root,
    )
    assert out.returncode == 0, out.stderr
    spans = json.loads(out.stdout.strip().splitlines()[-1])
    adk = [s for s in spans if s["scope"] == "gcp.vertex.agent"]
    ours = [s for s in spans if s["scope"] == "turnwatch"]
    assert {s["name"] for s in adk} >= {"invoke_agent a", "execute_tool look"}
    assert {s["trace"] for s in spans} == {adk[0]["trace"]}  # one trace
    (stop,) = [s for s in ours if s["name"] == names.SPAN_STOP]
    (tool,) = [s for s in adk if s["name"] == "execute_tool look"]
    assert stop["parent"] == tool["span"]
    keys = {k for s in ours for k in s["keys"]}
    assert not [k for k in keys if any(w in k for w in ("argument", "result", "input", "output"))]
