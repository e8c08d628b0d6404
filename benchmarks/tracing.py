"""Instrumentation cost per call, ledger and ingest rates, and the sessions view on a big ledger."""

from __future__ import annotations

import asyncio
import functools
import io
import json
import tempfile
import threading
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
from turnwatch.tracing.dedup import dedup_key
from turnwatch.tracing.eventlines import EventLines
from turnwatch.tracing.ingest import ingest, parse_line
from turnwatch.tracing.ledger import BATCH_MAX, Ledger, connect
from turnwatch.tracing.ledger_batch import _INSERT_EVENTS, _rows, write_batch
from turnwatch.tracing.pipeline import Telemetry
from turnwatch.tracing.spans import SpanBuilder
from turnwatch.tracing.summary import Summary

CALLS = 5000
REPS = 5
LEDGER_EVENTS = 200_000
INGEST_LINES = 50_000
BUSY_ROWS = 2000
VIEW_EVENTS = 1_000_000


async def noop(ctx: ToolContext) -> HostResult:
    ctx.notify(Started())
    return HostResult(HostStatus.OK, "ok")


async def per_call(sink: Telemetry | EventLines | None) -> tuple[float, float]:
    """Seconds per call until every event of the run is committed, and the event loop thread's
    own CPU time per call (building and enqueueing events, not the writer's work)."""
    host = LocalHost(subreaper=False)
    host.register("noop", noop)
    rt = Runtime(host, sink=sink)
    turn = rt.start_turn("s")
    started, cpu = time.perf_counter(), time.thread_time()
    for _ in range(CALLS):
        await turn.request("noop", {}, tool_class="extension").result()
    cpu = time.thread_time() - cpu
    if isinstance(sink, Telemetry) and sink.ledger is not None:
        sink.ledger.flush(timeout=600)
    return (time.perf_counter() - started) / CALLS, cpu / CALLS


def telemetry(path: Path, *, spans: bool = True, metrics: bool = True) -> Telemetry:
    return Telemetry(
        ledger=Ledger(path),
        spans=SpanBuilder(TracerProvider().get_tracer("b")) if spans else None,
        observers=[StopMetrics(CollectorRegistry())] if metrics else [],
    )


async def instrumentation(tmp: Path) -> list[list[object]]:
    """The same no-op workload bare and instrumented, interleaved, best of REPS each.

    The loop runs calls back to back, so the writer thread's work, which needs the GIL for its
    Python parts, slows the loop down: the wall time counts both threads. Each instrumented run
    has a fresh ledger and ends with the writer idle (flushed): no run pays another's backlog.
    """
    runs: dict[str, list[tuple[float, float]]] = {"bare": [], "ledger": [], "full": [], "lines": []}
    for rep in range(REPS):
        runs["bare"].append(await per_call(None))
        for label in ("ledger", "full"):
            tel = telemetry(tmp / f"{label}{rep}.sqlite3", spans=label == "full")
            runs[label].append(await per_call(tel))
            assert tel.ledger is not None
            tel.ledger.close()
        # The ledger written by a process of its own (README): the runtime only writes lines.
        lines = EventLines(tmp / f"lines{rep}.jsonl")
        runs["lines"].append(await per_call(lines))
        lines.close()

    def best(label: str, i: int) -> float:
        return min(r[i] for r in runs[label])

    def added(label: str, i: int) -> str:
        return f"+{fmt_s(best(label, i) - best('bare', i))} per call"

    def ratio(label: str) -> str:
        return f"{best(label, 0) / best('bare', 0):.2f}× the bare call"

    return [
        [
            "no-op tool call, no sink (the floor)",
            "1×",
            f"{fmt_s(best('bare', 0))}; best of {REPS}, {CALLS:,} calls",
        ],
        [
            "same, with ledger + spans + metrics, until every event is committed",
            ratio("full") + " (target ≤ 2.3×)",
            f"{fmt_s(best('full', 0))}, " + added("full", 0),
        ],
        [
            "the event loop thread's own CPU time, bare → instrumented",
            f"{best('full', 1) / best('bare', 1):.2f}× (target ≤ +15 µs)",
            f"{fmt_s(best('bare', 1))} → {fmt_s(best('full', 1))}, "
            + added("full", 1)
            + ": building and enqueueing events",
        ],
        [
            "ledger + metrics, no spans, until committed",
            ratio("ledger"),
            f"{fmt_s(best('ledger', 0))}, " + added("ledger", 0),
        ],
        [
            "same calls, an `EventLines` sink (its ledger, spans, metrics written by an "
            "`ingest --follow` of their own, not timed here)",
            ratio("lines"),
            f"{fmt_s(best('lines', 0))}, " + added("lines", 0) + "; the loop's CPU "
            f"{fmt_s(best('lines', 1))}, " + added("lines", 1),
        ],
    ]


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


def ingest_lines(evs: list[Event]) -> list[bytes]:
    """The JSON lines ``ingest`` is timed on: the first :data:`INGEST_LINES` of ``evs``."""
    return [json.dumps(e.to_json()).encode() for e in evs[:INGEST_LINES]]


def ledger_rate(tmp: Path) -> list[list[object]]:
    """The writer's rate beside its floor, measured in the same run (#31): the same rows
    inserted by one raw ``executemany`` per batch of the writer's size, in one transaction each,
    into a file of the same schema; and ``ingest`` beside a plain ``orjson`` parse of the same
    lines."""
    import orjson

    evs = events(LEDGER_EVENTS, 2000)
    rates, raw = [], []
    rows = _rows(evs)
    for rep in range(3):
        ledger = Ledger(tmp / f"rate{rep}.sqlite3")
        started = time.perf_counter()
        ledger.extend(evs, wait=True)  # more than QUEUE_MAX: dropped, they would count as written
        ledger.flush(timeout=600)
        rates.append(LEDGER_EVENTS / (time.perf_counter() - started))
        ledger.close()
        assert (ledger.written, ledger.lost) == (LEDGER_EVENTS, 0), "a rate of what was kept"
        conn = connect(tmp / f"raw{rep}.sqlite3")
        started = time.perf_counter()
        for i in range(0, len(rows), BATCH_MAX):
            # BEGIN and COMMIT said: connect() opens in autocommit (isolation_level=None), where
            # ``with conn:`` begins nothing and every row would be a transaction of its own
            # (a floor of ~10,000 rows/s, not a floor). The writer's batches, the same size.
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(_INSERT_EVENTS.row_sql, rows[i : i + BATCH_MAX])
            conn.execute("COMMIT")
        raw.append(LEDGER_EVENTS / (time.perf_counter() - started))
        conn.close()
    lines = b"\n".join(ingest_lines(evs))
    ingested, parsed = [], []
    for rep in range(3):
        ledger = Ledger(tmp / f"ingest{rep}.sqlite3")
        started = time.perf_counter()
        report = ingest(io.BytesIO(lines), Telemetry(ledger=ledger, dedup=True, wait=True))
        ledger.flush(timeout=600)
        ingested.append(INGEST_LINES / (time.perf_counter() - started))
        ledger.close()
        assert report.good == INGEST_LINES
        started = time.perf_counter()
        for line in lines.splitlines():
            orjson.loads(line)
        parsed.append(INGEST_LINES / (time.perf_counter() - started))
    return [
        [
            "ledger append → committed",
            f"{max(rates) / max(raw):.2f} of its floor ({max(rates):,.0f} events/s)",
            f"floor: raw executemany of the same rows, {max(raw):,.0f}/s; best of 3, "
            f"{LEDGER_EVENTS:,} events (target ≥ 0.70)",
        ],
        [
            "JSON lines → validated → ledger (`ingest`)",
            f"{max(ingested) / max(parsed):.2f} of its floor ({max(ingested):,.0f} lines/s)",
            f"floor: orjson.loads of the same lines, {max(parsed):,.0f}/s; best of 3 "
            "(target ≥ 150,000 lines/s)",
        ],
    ]


def ingest_stages(tmp: Path) -> list[list[object]]:
    """Where an ingested line's time goes: each stage of ``ingest`` alone, in this thread, over
    the lines ``ledger_rate`` ingests (best of 3 each): parse and validate, the dedup key, and
    the write (summaries folded, rows and keys inserted, a transaction per writer's batch)."""
    lines = ingest_lines(events(LEDGER_EVENTS, 2000))
    parsed: list[Event] = []
    keys: list[str | None] = []

    def parse() -> None:
        parsed[:] = [
            ev for i, raw in enumerate(lines) if isinstance(ev := parse_line(raw, i), Event)
        ]

    def key() -> None:
        keys[:] = [dedup_key(ev) for ev in parsed]

    def write(rep: int) -> None:
        conn = connect(tmp / f"stages{rep}.sqlite3")
        batch, summary = list(zip(parsed, keys, strict=True)), Summary()
        for i in range(0, len(batch), BATCH_MAX):
            write_batch(conn, summary, batch[i : i + BATCH_MAX])
        conn.close()

    best: dict[str, float] = {}
    for rep in range(3):
        for label, run in (
            ("parse", parse),
            ("key", key),
            ("write", functools.partial(write, rep)),
        ):
            started = time.perf_counter()
            run()
            took = (time.perf_counter() - started) / INGEST_LINES
            best[label] = min(best.get(label, took), took)
    assert len(parsed) == INGEST_LINES
    total = sum(best.values())
    return [
        [
            f"`ingest` by stage, each alone: {what}",
            f"{best[label] / total:.0%} ({fmt_s(best[label])} a line)",
            f"of {fmt_s(total)} a line together ({1 / total:,.0f} lines/s)"
            if label == "parse"
            else "",
        ]
        for label, what in (
            ("parse", "parse and validate"),
            ("key", "the dedup key"),
            ("write", "the write (summaries, rows, keys)"),
        )
    ]


def _spin(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(1000))


def busy_inserts(tmp: Path) -> list[list[object]]:
    """Event rows inserted while another thread runs pure Python (a busy event loop).

    Every statement step releases the GIL; getting it back from a busy thread takes up to the
    switch interval (5 ms). One statement per batch against ``executemany``'s one per row.
    """
    rows = _rows(events(BUSY_ROWS, 20))
    results: dict[str, float] = {}
    for label in ("one statement per batch", "executemany, one step per row"):
        conn = connect(tmp / f"busy-{len(results)}.sqlite3")
        stop = threading.Event()
        spinner = threading.Thread(target=_spin, args=(stop,), daemon=True)
        spinner.start()
        started = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        if label.startswith("one"):
            _INSERT_EVENTS(conn, rows)
        else:
            conn.executemany(_INSERT_EVENTS.row_sql, rows)
        conn.execute("COMMIT")
        results[label] = BUSY_ROWS / (time.perf_counter() - started)
        stop.set()
        spinner.join()
        conn.close()
    fast, slow = results.values()
    return [
        [
            f"ledger rows with a busy thread beside: {label}",
            f"{rate:,.0f} rows/s",
            f"{fast / slow:,.0f}× faster" if rate == fast else "how 0.1.0 wrote",
        ]
        for label, rate in results.items()
    ]


def view_time(tmp: Path) -> list[list[object]]:
    path = tmp / "big.sqlite3"
    ledger = Ledger(path)
    ledger.extend(events(VIEW_EVENTS, 10_000), wait=True)  # past QUEUE_MAX: dropped otherwise
    ledger.flush(timeout=900)
    ledger.close()
    assert (ledger.written, ledger.lost) == (VIEW_EVENTS, 0), "a view of the ledger it names"
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
        rows += ingest_stages(Path(tmp))
        rows += busy_inserts(Path(tmp))
        rows += view_time(Path(tmp))
    return "### Tracing\n\n" + table(["what", "measured", "note"], rows) + "\n"


if __name__ == "__main__":
    print(asyncio.run(main()))
