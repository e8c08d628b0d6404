"""Instrumentation cost per call, ledger ingest rate, and the sessions view on a big ledger."""

from __future__ import annotations

import asyncio
import io
import json
import tempfile
import time
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from benchmarks.common import fmt_s, table
from turnwatch.exporters.metrics import StopMetrics
from turnwatch.runtime import HostResult, HostStatus, LocalHost, Runtime, Started
from turnwatch.runtime.events import Event
from turnwatch.runtime.tools.context import ToolContext
from turnwatch.tracing import view
from turnwatch.tracing.ingest import ingest
from turnwatch.tracing.ledger import Ledger, connect
from turnwatch.tracing.pipeline import Telemetry
from turnwatch.tracing.spans import SpanBuilder

CALLS = 5000
LEDGER_EVENTS = 200_000
VIEW_EVENTS = 1_000_000


async def noop(ctx: ToolContext) -> HostResult:
    ctx.notify(Started())
    return HostResult(HostStatus.OK, "ok")


async def per_call(sink: object | None) -> float:
    host = LocalHost(subreaper=False)
    host.register("noop", noop)
    rt = Runtime(host, sink=sink)  # type: ignore[arg-type]
    turn = rt.start_turn("s")
    started = time.perf_counter()
    for _ in range(CALLS):
        await turn.request("noop", {}, tool_class="extension").result()
    return (time.perf_counter() - started) / CALLS


async def instrumentation(tmp: Path) -> list[list[object]]:
    rows = []
    ledger = Ledger(tmp / "instr.sqlite3")
    full = Telemetry(
        ledger=ledger,
        spans=SpanBuilder(TracerProvider().get_tracer("b")),
        observers=[StopMetrics(CollectorRegistry())],
    )
    # Interleave the runs, best of 3 each: the machine is shared and noisy.
    bare, instr = [], []
    for _ in range(3):
        bare.append(await per_call(None))
        instr.append(await per_call(full))
    ledger.close()
    b, i = min(bare), min(instr)
    rows.append(["no-op tool call, no sink", fmt_s(b), ""])
    rows.append(["same, with ledger + spans + metrics", fmt_s(i), f"+{fmt_s(i - b)} per call"])
    return rows


def events(n: int, sessions: int) -> list[Event]:
    out = []
    now = time.time() - 3600
    per = n // sessions
    kinds = [
        "turn.started",
        "tool.requested",
        "tool.started",
        "tool.progress",
        "tool.finished",
        "turn.settled",
        "processing.cleared",
    ]
    for s in range(sessions):
        for i in range(per):
            k = (
                kinds[min(i, len(kinds) - 1)]
                if i < 3
                else ("tool.progress" if i < per - 3 else kinds[4 + (i - (per - 3))])
            )
            attrs = {"outcome": "completed"} if k in ("turn.settled", "tool.finished") else {}
            call = "c1" if k.startswith("tool.") else None
            out.append(
                Event(
                    k,
                    f"s{s}",
                    now + i * 0.01,
                    turn="t1",
                    call=call,
                    tool="Grep" if call else None,
                    attrs=attrs,
                )
            )
    return out


def ledger_rate(tmp: Path) -> list[list[object]]:
    evs = events(LEDGER_EVENTS, 2000)
    ledger = Ledger(tmp / "rate.sqlite3")
    started = time.perf_counter()
    ledger.extend(evs)
    ledger.flush(timeout=600)
    took = time.perf_counter() - started
    ledger.close()
    lines = "\n".join(json.dumps(e.to_json()) for e in evs[:50_000]).encode()
    ledger2 = Ledger(tmp / "ingest.sqlite3")
    started = time.perf_counter()
    report = ingest(io.BytesIO(lines), Telemetry(ledger=ledger2, dedup=True))
    ledger2.flush(timeout=600)
    took2 = time.perf_counter() - started
    ledger2.close()
    assert report.good == 50_000
    return [
        ["ledger append → committed", f"{LEDGER_EVENTS / took:,.0f} events/s", ""],
        [
            "JSON lines → validated → ledger (`ingest`)",
            f"{50_000 / took2:,.0f} events/s",
            "schema validation per line",
        ],
    ]


def view_time(tmp: Path) -> list[list[object]]:
    path = tmp / "big.sqlite3"
    ledger = Ledger(path)
    ledger.extend(events(VIEW_EVENTS, 10_000))
    ledger.flush(timeout=900)
    ledger.close()
    conn = connect(path, readonly=True)
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        rows = view.sessions(conn)
        runs.append(time.perf_counter() - started)
    assert len(rows) == 10_000
    conn.close()
    return [
        [f"sessions view, {VIEW_EVENTS:,}-event ledger (10,000 sessions)", fmt_s(min(runs)), ""]
    ]


async def main() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        rows = await instrumentation(Path(tmp))
        rows += ledger_rate(Path(tmp))
        rows += view_time(Path(tmp))
    return "### Tracing\n\n" + table(["what", "measured", "note"], rows) + "\n"


if __name__ == "__main__":
    print(asyncio.run(main()))
