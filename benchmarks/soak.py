"""The soak: one runtime with full telemetry (ledger, spans, metrics) serving many sessions into a
ledger that is pruned as ``watch --retain`` prunes it. At 10 %, 50 % and 100 % it prints RSS,
the ledger's size, a watchdog scan's time beside the same scan over a ledger holding only the
same live sessions (its floor), and sessions/s, as ratios first.

    TURNWATCH_SOAK_SESSIONS=1000000 python -m benchmarks.soak   # default 1,000,000

Then one session served ``TURNWATCH_SOAK_TURNS`` turns (100,000): the RSS it holds as it goes.

Each session: three turns of a read-only call and an awaited call, the last one stopped; ten
sessions stay processing throughout (the live set a scan must look at). ``run`` is what the
scaled test in ``make test`` drives (``tests/test_soak.py``): it returns the counts of what was
kept, never a time to assert.
"""

from __future__ import annotations

import asyncio
import gc
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from benchmarks.common import median, table
from benchmarks.tracing import noop
from turnwatch.exporters.metrics import StopMetrics
from turnwatch.runtime import HostResult, HostStatus, LocalHost, Runtime
from turnwatch.runtime.retention import MAX_SETTLED, MAX_SETTLED_TURNS
from turnwatch.runtime.tools.context import ToolContext
from turnwatch.tracing import view
from turnwatch.tracing.ledger import Ledger, connect
from turnwatch.tracing.pipeline import Telemetry
from turnwatch.tracing.prune import prune
from turnwatch.tracing.spans import SpanBuilder
from turnwatch.watchdog.scan import scan

LIVE = 10
#: Pruned this often (in sessions served) with this horizon: what ``watch --retain`` does, sped up.
PRUNE_EVERY = 5_000
RETAIN_S = 2.0
#: The runtime waits for its writer this often (in sessions, ~40 events each): served as fast
#: as the loop can, it outruns a writer that also builds spans, and past QUEUE_MAX events
#: behind the ledger drops what it is given (loudly, and counted in ``lost``). A real runtime's
#: tools take milliseconds to minutes; a soak that overran the writer measured its queue.
WAIT_EVERY = 500


@dataclass
class Point:
    """One checkpoint of the soak."""

    served: int
    rss: int
    ledger_bytes: int
    scan_s: float
    per_s: float
    held: int  # sessions the runtime holds
    rows: int  # sessions the ledger holds
    lost: int  # events the ledger dropped, its writer too far behind (0, or the soak is wrong)


@dataclass
class Soak:
    points: list[Point] = field(default_factory=list)
    floor_scan_s: float = 0.0


def _scan_s(path: Path) -> float:
    conn = connect(path, readonly=True)
    try:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            scan(conn)
            times.append(time.perf_counter() - t0)
        return median(times)
    finally:
        conn.close()


def _bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


async def _session(rt: Runtime, sid: str) -> None:
    for t in range(3):
        turn = rt.start_turn(sid)
        calls = [
            turn.request("noop", {}, tool_class="read_only"),
            turn.request("noop", {}, tool_class="mutating"),
        ]
        if t == 2:
            await rt.abort(sid)
        else:
            for c in calls:
                await c.result()
            await turn.finish()


async def _live(rt: Runtime) -> None:
    for i in range(LIVE):  # processing all through: a turn with a call that never answers
        turn = rt.start_turn(f"live{i}")
        turn.request("hang", {}, tool_class="read_only")


async def _hang(ctx: ToolContext) -> HostResult:
    await asyncio.sleep(10**9)
    raise AssertionError("unreachable")


async def run(
    sessions: int,
    tmp: Path,
    *,
    checkpoints: tuple[float, ...] = (0.1, 0.5, 1.0),
    prune_every: int = PRUNE_EVERY,
    retain_s: float = RETAIN_S,
    max_settled: int = MAX_SETTLED,
) -> Soak:
    """Serve ``sessions`` and measure at each fraction of them in ``checkpoints``, pruning the
    ledger every ``prune_every`` sessions of what settled ``retain_s`` ago."""
    out = Soak()
    floor = tmp / "floor.sqlite3"
    path = tmp / "soak.sqlite3"
    for where, n in ((floor, 0), (path, sessions)):
        host = LocalHost(subreaper=False)
        host.register("noop", noop)
        host.register("hang", _hang)
        tel = Telemetry(
            ledger=Ledger(where),
            spans=SpanBuilder(TracerProvider().get_tracer("soak")),
            observers=[StopMetrics(CollectorRegistry())],
        )
        assert tel.ledger is not None
        rt = Runtime(host, sink=tel, max_settled=max_settled)
        await _live(rt)
        marks = sorted({max(1, int(sessions * f)) for f in checkpoints}) if n else []
        started, last, done = time.perf_counter(), 0, 0
        for i in range(n):
            await _session(rt, f"s{i}")
            done = i + 1
            if done % WAIT_EVERY == 0:
                await asyncio.to_thread(tel.ledger.flush, 600)
            if done % prune_every == 0:
                tel.ledger.flush(timeout=600)
                conn = connect(where)
                await asyncio.to_thread(prune, conn, time.time() - retain_s)
                conn.close()
            if marks and done == marks[0]:
                marks.pop(0)
                tel.ledger.flush(timeout=600)
                now = time.perf_counter()
                per_s = (done - last) / (now - started)
                held = len(rt.sessions)
                look = connect(where, readonly=True)
                rows = view.count(look)
                look.close()
                point = Point(
                    done,
                    psutil.Process().memory_info().rss,
                    _bytes(where),
                    _scan_s(where),
                    per_s,
                    held,
                    rows,
                    tel.ledger.lost,
                )
                out.points.append(point)
                started, last = time.perf_counter(), done
        tel.ledger.flush(timeout=600)
        if n == 0:
            out.floor_scan_s = _scan_s(where)
        for i in range(LIVE):  # released (raced and discarded) before the ledger closes
            await rt.abort(f"live{i}")
        tel.ledger.close()
    return out


def report(soak: Soak) -> str:
    first = soak.points[0]
    rows = [
        [
            f"{p.served:,}",
            f"{p.rss / first.rss:.2f}× ({p.rss / 2**20:.0f} MiB)",
            f"{p.scan_s / soak.floor_scan_s:.2f}× ({p.scan_s * 1e3:.1f} ms; floor "
            f"{soak.floor_scan_s * 1e3:.1f} ms)",
            f"{p.ledger_bytes / first.ledger_bytes:.2f}× ({p.ledger_bytes / 2**20:.1f} MiB)",
            f"{p.per_s:,.0f}",
            f"{p.held:,} / {p.rows:,}",
            f"{p.lost:,}",
        ]
        for p in soak.points
    ]
    head = [
        "served",
        "RSS (vs first)",
        "scan (vs the live set alone)",
        "ledger (vs first)",
        "sessions/s",
        "held by the runtime / rows in the ledger",
        "events lost",
    ]
    return "### Soak\n\n" + table(head, rows) + "\n"


#: What each call of the long session returns: kept whole, 10 KB a turn.
RESULT = HostResult(HostStatus.OK, "x" * 10_000)


async def _answer() -> HostResult:
    return RESULT


async def long_session(turns: int, marks: tuple[float, ...] = (0.01, 0.1, 0.5, 1.0)) -> str:
    """One session served ``turns`` turns, each a read-only call whose result is 10 KB (a chat
    left open for months): the RSS it holds at each mark, beside the first mark (the turns a
    session keeps whole, ``MAX_SETTLED_TURNS`` and up to as many again, are all there by then),
    and the turns it holds."""
    rt = Runtime(LocalHost(subreaper=False))
    gc.collect()
    base = psutil.Process().memory_info().rss
    at = sorted({max(2 * MAX_SETTLED_TURNS + 1, int(turns * f)) for f in marks})
    rows: list[list[object]] = []
    first = first_at = 0
    started = time.perf_counter()
    for i in range(1, turns + 1):
        turn = rt.start_turn("long")
        await turn.run_call("Grep", _answer, tool_class="read_only")
        await turn.finish()
        if at and i == at[0]:
            at.pop(0)
            gc.collect()
            held = psutil.Process().memory_info().rss - base
            first, first_at = first or max(held, 4096), first_at or i  # a warm heap may not grow
            further = (held - first) / (i - first_at) if i > first_at else 0.0
            rows.append(
                [
                    f"{i:,}",
                    f"{held / 2**20:.1f} MiB",
                    # Beside what keeping it whole costs a turn: a ratio to the first mark means
                    # nothing where a warm heap (the soak before) held next to nothing there.
                    f"{further / len(RESULT.output):.1%} ({round(further):,} B)",
                    f"{len(rt.sessions['long'].turns):,}",
                    f"{i / (time.perf_counter() - started):,.0f}",
                ]
            )
    head = [
        "turns served",
        "RSS held",
        "RSS per turn since the first mark, of its result kept whole (10,000 B)",
        "turns held whole",
        "turns/s",
    ]
    return (
        "### One session, many turns\n\n"
        f"Kept whole, {turns:,} turns of a 10 KB result would be {turns * 10_000 / 2**20:,.0f} MiB."
        "\n\n" + table(head, rows) + "\n"
    )


async def main() -> str:
    n = int(os.environ.get("TURNWATCH_SOAK_SESSIONS", "1000000"))
    turns = int(os.environ.get("TURNWATCH_SOAK_TURNS", "100000"))
    with tempfile.TemporaryDirectory() as tmp:
        return report(await run(n, Path(tmp))) + "\n" + await long_session(turns)


if __name__ == "__main__":
    print(asyncio.run(main()))
