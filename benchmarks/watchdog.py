"""The watchdog: one scan over 10,000 sessions with 50,000 recorded processes (most dead), its
CPU share at a 5 s interval, and how long a pinned session waits to be detected.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.common import fmt_s, median, table
from turnwatch.runtime.events import Event
from turnwatch.tracing.ledger import Ledger, connect
from turnwatch.watchdog.loop import Cycle, Watchdog
from turnwatch.watchdog.scan import Config, scan

SESSIONS = 10_000
PROCS_PER_SESSION = 5
INTERVAL_S = 5.0


def build(path: Path) -> None:
    """10,000 sessions, 50,000 recorded Bash processes: dead pids, a few live ones (ours)."""
    ledger = Ledger(path)
    # Faster than the writer commits: past QUEUE_MAX these would be dropped, not waited for.
    put = functools.partial(ledger.append, wait=True)
    me = psutil.Process()
    now = time.time() - 120
    rnd = random.Random(7)
    for s in range(SESSIONS):
        sess = f"s{s}"
        put(
            Event(
                "runtime.started",
                sess,
                now,
                attrs={"pid": me.pid, "create_time": me.create_time(), "mode": "adr"},
            )
        )
        put(Event("turn.started", sess, now, turn="t"))
        for c in range(PROCS_PER_SESSION):
            call = f"c{c}"
            put(Event("tool.requested", sess, now, turn="t", call=call, tool="Bash"))
            put(
                Event(
                    "tool.started",
                    sess,
                    now,
                    turn="t",
                    call=call,
                    tool="Bash",
                    attrs={"pid": rnd.randint(2, 4_000_000), "create_time": now},
                )
            )
            put(
                Event(
                    "tool.finished",
                    sess,
                    now + 1,
                    turn="t",
                    call=call,
                    tool="Bash",
                    attrs={"outcome": "completed"},
                )
            )
        put(Event("turn.settled", sess, now + 2, turn="t", attrs={"outcome": "completed"}))
        put(Event("processing.cleared", sess, now + 2, turn="t"))
    ledger.close()
    assert ledger.lost == 0, "the ledger the scan is timed over holds every event"


async def detection(path: Path) -> list[float]:
    """Time from a session becoming pinned to the watchdog's finding, at a 0.5 s interval."""
    interval = 0.5
    ledger = Ledger(path)
    dog = Watchdog(path, ledger, ledger.flush, cfg=Config(rpc_stuck_s=0.0), recover=False)
    stop = asyncio.Event()
    seen: dict[str, asyncio.Event] = {f"pin{i}": asyncio.Event() for i in range(5)}

    def found(cycle: Cycle) -> None:
        for f in cycle.findings:
            if f.session in seen:
                seen[f.session].set()

    loop_task = asyncio.ensure_future(dog.run(interval, stop, after_cycle=found))
    waits = []
    for i in range(5):
        await asyncio.sleep(random.uniform(0, interval))
        sess = f"pin{i}"
        t0 = time.time()
        for kind in ("turn.started", "stop.clicked", "abort.rpc.received"):
            ledger.append(Event(kind, sess, t0, turn="t"))
        ledger.flush()
        await seen[sess].wait()
        waits.append(time.time() - t0)
    stop.set()
    await loop_task
    ledger.close()
    return waits


def main() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.sqlite3"
        build(path)
        conn = connect(path, readonly=True)
        runs = []
        cpu = []
        for _ in range(5):
            c0, t0 = os.times(), time.perf_counter()
            result = scan(conn)
            runs.append(time.perf_counter() - t0)
            c1 = os.times()
            cpu.append((c1.user - c0.user) + (c1.system - c0.system))
        conn.close()
        waits = asyncio.run(detection(path))
    rows = [
        [
            f"one scan: {SESSIONS:,} sessions, {SESSIONS * PROCS_PER_SESSION:,} recorded processes",
            fmt_s(median(runs)),
            f"worst {fmt_s(max(runs))}; {len(result.findings)} findings",
        ],
        [
            f"loop CPU share at a {INTERVAL_S:g} s interval",
            f"{median(cpu) / INTERVAL_S:.2%}",
            "CPU time of one scan / interval",
        ],
        [
            "pinned → detected, 0.5 s interval (5 trials)",
            fmt_s(median(waits)),
            f"worst {fmt_s(max(waits))}",
        ],
    ]
    return "### Watchdog\n\n" + table(["what", "measured", "note"], rows) + "\n"


if __name__ == "__main__":
    print(main())
