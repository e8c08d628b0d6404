"""The demo: the field reports, reproduced with the real runtime, real tools, real processes.

Session ``demo-adr`` runs a Grep over a tree that takes minutes to read, a Bash that ignores
SIGTERM and has a child, a Write whose permission is pending, a Write in progress, and an image
render; session ``demo-legacy`` runs the same Grep in ``legacy`` mode. Both are stopped at once:
the ADR session settles at once (the Bash within its grace window), the legacy one pins until the
watchdog finds it and runs the abort walk.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from turnwatch import names
from turnwatch.runtime import (
    CallHandle,
    Event,
    EventSink,
    FanOut,
    LocalHost,
    MemorySink,
    Mode,
    Receipt,
    Runtime,
)
from turnwatch.runtime.model import POLICY_OF, RecoveryResult
from turnwatch.runtime.procfs import ProcessTable
from turnwatch.runtime.tools.mcp import McpServerConfig
from turnwatch.runtime.tools.proctree import CALL_MARKER
from turnwatch.tracing.ledger import Ledger
from turnwatch.watchdog.loop import Watchdog
from turnwatch.watchdog.scan import Config

#: A Grep over this many hard links of one file reads for minutes, for the cost of a few links.
TREE_LINKS = 4000
TREE_FILE_LINES = 200_000
WRITE_BYTES = 128 * 1024 * 1024
GREP = {"pattern": "TODO\\(stop\\)"}
BASH = "trap '' TERM; sleep 600 & echo building; while :; do sleep 1; done"


def make_tree(root: Path, links: int = TREE_LINKS) -> Path:
    """A real tree large enough that a Grep over it runs for minutes (hard links: no disk)."""
    tree = root / "monorepo"
    tree.mkdir(parents=True, exist_ok=True)
    body = root / "body.js"
    if not body.exists():
        body.write_text(
            "const handler = require('./handler');  // nothing to see\n" * TREE_FILE_LINES
        )
    for i in range(links):
        link = tree / f"pkg{i // 100:03d}" / f"mod{i:05d}.js"
        link.parent.mkdir(exist_ok=True)
        if not link.exists():
            os.link(body, link)
    return tree


@dataclass
class CallReport:
    """One stopped call, as the demo prints it."""

    session: str
    tool: str
    tool_class: str
    policy: str
    outcome: str
    stop_to_release_s: float | None
    detail: str = ""
    pid: int | None = None
    started: bool = False


@dataclass
class DemoReport:
    """What the demo saw: per-call outcomes, per-session stop timing, leftovers, the events."""

    calls: list[CallReport] = field(default_factory=list)
    settle_s: dict[str, float] = field(default_factory=dict)
    modes: dict[str, str] = field(default_factory=dict)
    recovered: dict[str, bool] = field(default_factory=dict)
    late_approval: str = ""
    leftover_pids: list[int] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    ledger: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "calls": [asdict(c) for c in self.calls],
            "sessions": {
                s: {
                    "mode": self.modes[s],
                    "stop_to_settle_s": t,
                    "recovered_by_watchdog": self.recovered.get(s, False),
                }
                for s, t in self.settle_s.items()
            },
            "late_approval": self.late_approval,
            "leftover_pids": self.leftover_pids,
            "ledger": self.ledger,
        }


def _first(events: list[Event], pred: Callable[[Event], bool]) -> Event | None:
    return next((e for e in events if pred(e)), None)


#: The demo's calls in the order its report lists them (the order of the scenario's story).
REPORTED = (
    "Grep",
    "Bash",
    "Write (permission pending)",
    "GenerateImages",
    "MCP deploy",
    "Write (in progress)",
)


async def _soon(event: Awaitable[object], timeout: float = 30.0) -> None:
    """Wait for ``event``; a demo that cannot show a step goes on without it after ``timeout``."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event, timeout)


async def watchdog_recovers(
    ledger: Ledger,
    runtime: Runtime,
    session: str,
    *,
    grace_s: float,
    pinned_after_s: float,
    say: Callable[[str], None],
) -> bool:
    """Run the real watchdog beside the runtime until it has recovered ``session``."""
    # On the loop: a ledger that cannot be written must not hold it (the watchdog's own state
    # of the runtime is what finds the session then).
    flush = partial(ledger.flush, failing_wait_s=0.0)
    dog = Watchdog(
        ledger.path,
        ledger,
        flush,
        cfg=Config(grace_s=grace_s, rpc_stuck_s=pinned_after_s),
        runtime=runtime,
    )
    for _ in range(300):
        flush()
        cycle = await dog.cycle()
        for a in cycle.actions:
            if a.finding.session == session and a.result is RecoveryResult.OK:
                say(f"watchdog: {a.finding.kind} in {session} → {a.said} ({a.detail})")
                return True
        await asyncio.sleep(0.1)
    return False


def leftovers(events: list[Event], since: float) -> list[int]:
    """Live processes of this run's calls: each carries the marker of a call this run started
    (its session and call id, the run's own) and started after the run began. Another
    process that merely says ``TURNWATCH_CALL=demo-…`` is not the demo's."""
    markers = {
        f"{CALL_MARKER}={e.session}/{e.call}".encode()
        for e in events
        if e.kind == names.TOOL_STARTED and e.call is not None
    }
    table = ProcessTable.scan()
    out = []
    for pid, proc in table.procs.items():
        if proc.zombie or proc.create_time < since:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = set(fh.read().split(b"\0"))
        except OSError:
            continue
        if env & markers:
            out.append(pid)
    return out


async def run_demo(
    *,
    grace_s: float = 2.0,
    workdir: Path | None = None,
    sink: EventSink | None = None,
    ledger: Ledger | None = None,
    pin_for_s: float = 1.5,
    say: Callable[[str], None] = lambda _m: None,
) -> DemoReport:
    """Run the scenario. With a ledger, the real watchdog recovers the pinned legacy session."""
    memory = MemorySink()
    out = FanOut(memory, sink) if sink is not None else memory
    tmp = Path(workdir or tempfile.mkdtemp(prefix="turnwatch-demo-"))
    say("generating a tree a Grep needs minutes to read")
    tree = str(await asyncio.to_thread(make_tree, tmp))
    host = LocalHost()
    # A real MCP server over stdio whose deploy finishes what it started, cancel or not.
    await host.add_mcp_server(
        McpServerConfig("demo", sys.executable, ("-m", "turnwatch.testing_mcp"))
    )
    try:
        return await _scenario(host, tmp, tree, grace_s, out, memory, ledger, pin_for_s, say)
    finally:
        await host.close()


async def _scenario(
    host: LocalHost,
    tmp: Path,
    tree: str,
    grace_s: float,
    out: EventSink,
    memory: MemorySink,
    ledger: Ledger | None,
    pin_for_s: float,
    say: Callable[[str], None],
) -> DemoReport:
    adr = Runtime(host, grace_s=grace_s, sink=out, ask_permission=lambda tool, _c: tool == "Write")
    legacy = Runtime(host, mode=Mode.LEGACY, grace_s=grace_s, sink=out)

    say(
        "demo-adr: a long Grep, a Bash that ignores SIGTERM, a Write awaiting permission, "
        "an image render, a Write in progress"
    )
    began = time.time() - 1.0  # the processes of this run start after this (create times: ticks)
    # Turn (and so call) ids unique to this run: a second demo into the same --ledger adds a
    # turn to each session instead of merging its calls into the first run's.
    run = f"{os.getpid():x}{int(time.time() * 1000) % 0xFFFF:04x}"
    turn = adr.start_turn("demo-adr", f"demo-adr.{run}")
    calls = {
        "Grep": turn.request("Grep", {**GREP, "path": tree}),
        "Bash": turn.request("Bash", {"command": BASH}),
        "Write (permission pending)": turn.request(
            "Write", {"path": str(tmp / "never-approved.txt"), "content": "x"}
        ),
        "GenerateImages": turn.request(
            "GenerateImages", {"prompt": "a stop sign", "out": str(tmp / "stop.png"), "steps": 1000}
        ),
    }
    say("demo-legacy (mode legacy): the same Grep")
    legacy_grep = legacy.start_turn("demo-legacy", f"demo-legacy.{run}").request(
        "Grep", {**GREP, "path": tree}
    )
    for k in ("Bash", "GenerateImages"):
        await _soon(memory.wait_for(names.TOOL_PROGRESS, call=calls[k].call_id))
    write = turn.request("Write", {"path": str(tmp / "big.bin"), "content": "x" * WRITE_BYTES})
    calls["Write (in progress)"] = write
    await _soon(memory.wait_for(names.PERMISSION_REQUESTED, call=write.call_id))
    adr.answer_permission("demo-adr", write.call_id, approved=True)  # this one the user allows
    await _soon(memory.wait_for(names.TOOL_PROGRESS, call=write.call_id))
    # The deploy last, just before the click: its 1.5 s run from its start, and on a busy
    # machine the steps above took longer than that, the deploy done before the stop it was
    # there to outlive.
    deploy = turn.request("mcp__demo__deploy", {"seconds": 1.5})
    await _soon(memory.wait_for(names.TOOL_STARTED, call=deploy.call_id))
    calls["MCP deploy"] = deploy
    calls = {k: calls[k] for k in REPORTED}

    say("Stop clicked in both sessions")
    clicked = time.time()
    adr_stop = asyncio.ensure_future(adr.abort("demo-adr", clicked_at=clicked))
    legacy_stop = asyncio.ensure_future(legacy.abort("demo-legacy", clicked_at=clicked))
    await adr_stop
    late = adr.answer_permission("demo-adr", calls["Write (permission pending)"].call_id, True)
    say(
        f"demo-adr settled; the user approves the closed prompt: {late.value}; "
        "demo-legacy is still pinned by its Grep"
    )
    if ledger is not None:
        recovered = await watchdog_recovers(
            ledger, legacy, "demo-legacy", grace_s=grace_s, pinned_after_s=pin_for_s, say=say
        )
    else:
        await asyncio.sleep(pin_for_s)
        recovered = await legacy.abort("demo-legacy", source="watchdog") is Receipt.JOINED
    await legacy_stop
    report = DemoReport(late_approval=late.value)
    report.recovered["demo-legacy"] = recovered
    for label, h in [*calls.items(), ("Grep (legacy)", legacy_grep)]:
        report.calls.append(await _call_report(label, h, memory.events))
    for rt, sess in ((adr, "demo-adr"), (legacy, "demo-legacy")):
        settled = _first(memory.events, partial(_is_settled, sess))
        report.settle_s[sess] = _span(_stop_of(memory.events, sess), settled) or 0.0
        report.modes[sess] = rt.mode.value
    report.leftover_pids = leftovers(memory.events, began)
    report.events = memory.events
    return report


def _is_settled(session: str, e: Event) -> bool:
    return e.session == session and e.kind == names.TURN_SETTLED


def _stop_of(events: list[Event], session: str) -> Event | None:
    """Where a session's stop starts: the click, else the RPC."""
    return _first(
        events,
        lambda e: e.session == session and e.kind in (names.STOP_CLICKED, names.ABORT_RPC_RECEIVED),
    )


def _span(a: Event | None, b: Event | None) -> float | None:
    if a is None or b is None or a.mono_ns is None or b.mono_ns is None:
        return None
    return (b.mono_ns - a.mono_ns) / 1e9


async def _call_report(label: str, h: CallHandle, events: list[Event]) -> CallReport:
    res = await h.result()
    stop = _stop_of(events, h.session)
    end = _first(
        events,
        lambda e: (
            e.call == h.call_id and e.kind in (names.TOOL_FINISHED, names.TOOL_RESULT_DISCARDED)
        ),
    )
    started = _first(events, lambda e: e.call == h.call_id and e.kind == names.TOOL_STARTED)
    if res.data and "terminated_by" in res.data:
        detail = f"terminated by {res.data['terminated_by']}"
    elif res.data and "bytes" in res.data:
        detail = f"awaited: {res.data['bytes'] / 2**20:g} MiB written whole"
    elif started is None:
        detail = "closed before it started"
    else:
        detail = (res.output.strip().splitlines() or [""])[-1][:60]
    return CallReport(
        h.session,
        label,
        h.tool_class.value,
        POLICY_OF[h.tool_class].value,
        res.outcome.value,
        _span(stop, end),
        detail,
        started.attrs.get(names.K_PID) if started else None,
        started is not None,
    )
