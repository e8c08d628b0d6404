"""The four modes on one workload: 100 concurrent sessions, each with a Grep that cannot finish
(it reads a FIFO no one writes: a hung mount, so the worker cannot be cancelled and burns no CPU),
a Bash that honours SIGTERM, a Bash that ignores it (grace 1 s) and a Write whose permission
prompt is open at the stop (the user approves it afterwards: only ``abandon_all`` lets it run).
Stops are clicked one session at a time; per tool class, stop → call released.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections import defaultdict
from pathlib import Path

from benchmarks.common import fmt_s, median, pct, table
from benchmarks.tracing import telemetry
from turnwatch import names
from turnwatch.runtime import CallHandle, LocalHost, MemorySink, Mode, Runtime
from turnwatch.runtime.events import FanOut
from turnwatch.testing import check_invariants
from turnwatch.tracing.pipeline import Telemetry

SESSIONS = 100
GRACE_S = 1.0
PIN_TIMEOUT_S = 3.0  # a legacy stop still pending after this is counted pinned
LABELS = {"Bash": "Bash (honours TERM)", "Write": "Write (prompt open)"}


def release(fifo: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)


async def run_mode(
    mode: Mode, tmp: Path, *, storm: bool = False, traced: Telemetry | None = None
) -> dict[str, object]:
    """One mode's run; ``traced`` also gets every event (ledger, spans, metrics)."""
    sink = MemorySink()
    rt = Runtime(
        LocalHost(),
        mode=mode,
        grace_s=GRACE_S,
        sink=FanOut(sink, traced) if traced is not None else sink,
        max_running=8,
        ask_permission=lambda tool, _c: tool == "Write",
    )
    fifos, honours = await _start(rt, sink, mode, tmp)
    stops = await _click(rt, honours, storm)
    _, pending = await asyncio.wait(stops, timeout=GRACE_S + PIN_TIMEOUT_S)
    pinned = len(pending)
    for e in sink.of(names.PERMISSION_REQUESTED):  # the user approves, after the stop
        assert e.call is not None
        rt.answer_permission(e.session, e.call, True)
    await asyncio.sleep(0.2)
    for i in range(SESSIONS):  # recover what pinned (legacy), so nothing is left running
        await rt.abort(f"s{i}", source="watchdog")
    await asyncio.wait(stops)
    for fifo in fifos:  # let the raced workers end
        release(fifo)
    by, reaped_to_release = _released(rt, sink)
    return {
        "mode": mode.value + (", traced" if traced is not None else ""),
        "by": by,
        "pinned": pinned,
        "violations": len(check_invariants(sink.events)),
        "reaped_to_release": reaped_to_release,
    }


async def _start(
    rt: Runtime, sink: MemorySink, mode: Mode, tmp: Path
) -> tuple[list[Path], list[CallHandle]]:
    """Every session's four calls, until the three that start have started."""
    fifos, honours, started = [], [], []
    for i in range(SESSIONS):
        fifo = tmp / f"{mode.value}-{i}.fifo"
        os.mkfifo(fifo)
        fifos.append(fifo)
        turn = rt.start_turn(f"s{i}")
        started.append(turn.request("Grep", {"pattern": "TODO", "path": str(fifo)}))
        honours.append(turn.request("Bash", {"command": "exec sleep 300"}))
        started.append(honours[-1])
        started.append(
            turn.request("Bash", {"command": "trap '' TERM; while :; do sleep 0.2; done"})
        )
        turn.request("Write", {"path": str(tmp / mode.value / f"w{i}"), "content": "x" * 2**22})
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(60):
            for h in started:
                await sink.wait_for(names.TOOL_STARTED, call=h.call_id)
    return fifos, honours


async def _click(
    rt: Runtime, honours: list[CallHandle], storm: bool
) -> list[asyncio.Future[object]]:
    """Stop every session: one at a time, or (``storm``) back to back."""
    stops: list[asyncio.Future[object]] = []
    for i in range(SESSIONS):
        stops.append(asyncio.ensure_future(rt.abort(f"s{i}")))
        if storm:  # back to back: each stop competes with the ones still being processed
            for _ in range(3):
                await asyncio.sleep(0)
            continue
        # One stop at a time while all the sessions' work goes on: the next click comes once
        # this session's fast calls are released (its SIGTERM-ignoring Bash still in grace).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(honours[i].result(), 5)
    return stops


def _released(rt: Runtime, sink: MemorySink) -> tuple[dict[str, list[float]], list[float]]:
    """Stop → released per tool class, and (Bash honouring TERM) reaped → released."""
    klass = {e.call: (e.tool or "", e.attrs.get("class")) for e in sink.of(names.TOOL_REQUESTED)}
    by_watchdog = {
        e.call for e in sink.of(names.TOOLS_ABORT_SENT) if e.attrs.get("source") == "watchdog"
    }
    click = {
        e.session: e.mono_ns
        for e in sink.events
        if e.kind == names.ABORT_RPC_RECEIVED and e.attrs.get("receipt") == "accepted"
    }
    by: dict[str, list[float]] = defaultdict(list)
    reaped_to_release: list[float] = []
    for e in sink.events:
        if e.kind not in (names.TOOL_FINISHED, names.TOOL_RESULT_DISCARDED) or e.call is None:
            continue
        tool, cls = klass[e.call]
        label = LABELS.get(tool, str(cls))
        if tool == "Bash" and "trap" in str(_args(rt, e.session, e.call)):
            label = "Bash (ignores TERM)"
        stopped = click.get(e.session)
        if e.call in by_watchdog or not e.mono_ns or not stopped or e.mono_ns < stopped:
            continue  # released by the watchdog's walk (a pin), or before the stop
        by[label].append((e.mono_ns - stopped) / 1e9)
        res = _result(rt, e.session, e.call)
        if label == "Bash (honours TERM)" and res and res.data and res.data.get("exit_mono_ns"):
            reaped_to_release.append((e.mono_ns - res.data["exit_mono_ns"]) / 1e9)
    return by, reaped_to_release


def _call(rt: Runtime, session: str, call: str):  # type: ignore[no-untyped-def]
    for t in rt.sessions[session].turns.values():
        if call in t.calls:
            return t.calls[call]
    return None


def _args(rt: Runtime, session: str, call: str) -> object:
    c = _call(rt, session, call)
    return c.args if c else None


def _result(rt: Runtime, session: str, call: str):  # type: ignore[no-untyped-def]
    c = _call(rt, session, call)
    return c.result.result() if c is not None and c.result.done() else None


async def main() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        for m in Mode:
            (Path(tmp) / m.value).mkdir()
        results = [await run_mode(m, Path(tmp)) for m in Mode]
        # The ADR again with the ledger writer, spans and metrics on: the writer thread shares
        # the GIL with the event loop the stops run on.
        (Path(tmp) / "traced" / "adr").mkdir(parents=True)
        traced = telemetry(Path(tmp) / "traced" / "ledger.sqlite3")
        results.insert(1, await run_mode(Mode.ADR, Path(tmp) / "traced", traced=traced))
        assert traced.ledger is not None
        traced.ledger.close()
        (Path(tmp) / "storm" / "adr").mkdir(parents=True)
        storm = await run_mode(Mode.ADR, Path(tmp) / "storm", storm=True)
    sby = storm["by"]
    assert isinstance(sby, dict)
    classes = ["read_only", "Bash (honours TERM)", "Bash (ignores TERM)", "Write (prompt open)"]
    rows = []
    for r in results:
        by = r["by"]
        assert isinstance(by, dict)
        cells = [
            f"{fmt_s(median(by[c]))} / {fmt_s(pct(by[c], 0.99))}" if by.get(c) else "pinned"
            for c in classes
        ]
        rows.append([r["mode"], *cells, r["pinned"], r["violations"]])
    adr = results[0]
    rr = adr["reaped_to_release"]
    assert isinstance(rr, list)
    storm_ro = sby.get("read_only", [])
    return (
        "### Stop → call released, per tool class (median / p99), "
        f"{SESSIONS} concurrent sessions stopped one after another, grace {GRACE_S:g} s\n\n"
        + table(["mode", *classes, "pinned sessions", "invariant violations"], rows)
        + f"\n\n`adr`: a Bash that honours SIGTERM is released {fmt_s(median(rr))} (median), "
        f"{fmt_s(pct(rr, 0.99))} (p99) after its process is reaped. With all {SESSIONS} stops "
        f"clicked back to back instead (a stop storm), `adr` read-only calls are released in "
        f"{fmt_s(median(storm_ro))} (median), {fmt_s(pct(storm_ro, 0.99))} (p99).\n"
    )


if __name__ == "__main__":
    print(asyncio.run(main()))
