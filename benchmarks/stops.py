"""Single stops, uncontended, and the abort walk over 10,000 in-flight calls."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import fmt_s, median, pct, table
from turnwatch import names
from turnwatch.runtime import (
    AbortRequest,
    ExecuteRequest,
    HostResult,
    LocalHost,
    MemorySink,
    Runtime,
    Started,
)
from turnwatch.runtime.protocol import MessageCallback, Reaped, TurnAbortRequest

RUNS = 30
WALK_CALLS = 10_000


async def single_stops() -> tuple[list[float], list[float]]:
    """One session at a time: a read-only race, and a Bash that honours SIGTERM."""
    race, reaped = [], []
    host = LocalHost()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(RUNS):
            fifo = Path(tmp) / f"{i}.fifo"
            os.mkfifo(fifo)
            sink = MemorySink()
            rt = Runtime(host, grace_s=5.0, sink=sink)
            turn = rt.start_turn("s")
            turn.request("Grep", {"pattern": "x", "path": str(fifo)})
            bash = turn.request("Bash", {"command": "echo up; exec sleep 300"})
            await sink.wait_for(names.TOOL_PROGRESS, call=bash.call_id)
            await rt.abort("s")
            click = sink.of(names.ABORT_RPC_RECEIVED)[0].mono_ns or 0
            race.append(((sink.of(names.TOOL_RESULT_DISCARDED)[0].mono_ns or 0) - click) / 1e9)
            res = await bash.result()
            done = sink.of(names.TOOL_FINISHED, call=bash.call_id)[0].mono_ns or 0
            assert res.data is not None
            reaped.append((done - res.data["exit_mono_ns"]) / 1e9)
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    return race, reaped


class PendingHost:
    """Holds every call open and acknowledges aborts: the walk is all that is measured."""

    def __init__(self) -> None:
        self.aborts = 0

    async def execute(self, request: ExecuteRequest, notify: MessageCallback) -> HostResult:
        notify(Started())
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    def abort(self, request: AbortRequest) -> None:
        self.aborts += 1

    async def abort_turn(self, request: TurnAbortRequest) -> Sequence[Reaped]:
        return ()


async def walk(sink: object | None) -> float:
    """abort() over WALK_CALLS in-flight read-only calls: click → turn settled.

    Each walk starts after a full collection: the 10,000 calls of the walk before are garbage
    cycles (call ↔ turn), and collecting them inside the next timed walk measured the
    collector, not the walk (one walk in five took 280 ms instead of 60). And another just
    before the click: the 10,000 calls just set up are what the collector's next full pass
    would traverse, and whether that pass falls inside the timed walk depends only on how
    many objects each call made (with a future and a buffer fewer per call it did: 167 ms
    against 71 ms without it, on a walk whose own work got cheaper).
    """
    gc.collect()
    host = PendingHost()
    rt = Runtime(host, sink=sink, max_running=WALK_CALLS)  # type: ignore[arg-type]
    turn = rt.start_turn("s")
    handles = [turn.request("Grep", {}) for _ in range(WALK_CALLS)]
    # PendingHost says nothing when a call starts: yield until the last ones have.
    while any(h.state != "running" for h in handles[-10:]):  # noqa: ASYNC110
        await asyncio.sleep(0)
    for _ in range(3):
        await asyncio.sleep(0)
    gc.collect()  # the setup's collection debt paid before the click (see above)
    settled: list[float] = []
    turn.settled.add_done_callback(lambda _f: settled.append(time.perf_counter()))
    started = time.perf_counter()
    await rt.abort("s")
    took = settled[0] - started
    assert host.aborts == WALK_CALLS
    for task in asyncio.all_tasks():  # the pending executes, now discarded
        if task.get_name().startswith("execute "):
            task.cancel()
    return took


async def cancels() -> float:
    """The walk's floor: WALK_CALLS pending asyncio tasks cancelled and seen done, nothing else
    (what the walk does per call at the least: end the wait it is in)."""
    gc.collect()
    never = asyncio.Event()
    tasks = [asyncio.ensure_future(never.wait()) for _ in range(WALK_CALLS)]
    for _ in range(3):
        await asyncio.sleep(0)
    gc.collect()  # as the walk does, just before its click
    started = time.perf_counter()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return time.perf_counter() - started


async def main() -> str:
    race, reaped = await single_stops()
    floors, walks_bare, walks_sink = [], [], []
    for _ in range(5):  # interleaved: a slow moment of a shared machine hits all three
        floors.append(await cancels())
        walks_bare.append(await walk(None))
        walks_sink.append(await walk(MemorySink()))
    floor = median(floors)
    rows = [
        ["read-only call released after the click", fmt_s(median(race)), fmt_s(pct(race, 0.99))],
        [
            "Bash (honours SIGTERM) released after it is reaped",
            fmt_s(median(reaped)),
            fmt_s(pct(reaped, 0.99)),
        ],
    ]
    return (
        f"### One stop at a time ({RUNS} runs)\n\n"
        + table(["", "median", "p99"], rows)
        + f"\n\n### abort() over {WALK_CALLS:,} in-flight calls (click → settled)\n\n"
        + table(
            ["sink", "× its floor", "median of 5", "worst of 5"],
            [
                ["none", f"{median(walks_bare) / floor:.2f}×", *_times(walks_bare)],
                [
                    "in-memory (every event built; target ≤ 2.2×)",
                    f"{median(walks_sink) / floor:.2f}×",
                    *_times(walks_sink),
                ],
                [f"floor: {WALK_CALLS:,} asyncio cancels", "1×", *_times(floors)],
            ],
        )
        + "\n"
    )


def _times(runs: list[float]) -> list[str]:
    return [fmt_s(median(runs)), fmt_s(max(runs))]


if __name__ == "__main__":
    print(asyncio.run(main()))
