"""The demo scenario: the field reports, reproduced with the real runtime and real processes."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turnwatch import names
from turnwatch.runtime import (
    Event,
    EventSink,
    FanOut,
    LocalHost,
    MemorySink,
    Mode,
    Runtime,
    ToolResult,
)

#: A Grep over this many hard links of one file reads for minutes, for the cost of a few links.
TREE_LINKS = 4000
TREE_FILE_LINES = 200_000


def make_tree(root: Path, links: int = TREE_LINKS) -> Path:
    """A real tree large enough that a Grep over it runs for minutes (hard links: no disk)."""
    tree = root / "monorepo"
    tree.mkdir(parents=True, exist_ok=True)
    body = root / "body.txt"
    if not body.exists():
        body.write_text(
            "const handler = require('./handler');  // no match here\n" * TREE_FILE_LINES
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
    stop_to_settle_s: float
    detail: str = ""


@dataclass
class DemoReport:
    """What the demo saw: per-call outcomes, per-session stop timing, the events."""

    calls: list[CallReport] = field(default_factory=list)
    settle_s: dict[str, float] = field(default_factory=dict)
    modes: dict[str, str] = field(default_factory=dict)
    recovered: dict[str, bool] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    ledger: str | None = None  # where the events were kept, when the user asked for a ledger

    def to_json(self) -> dict[str, Any]:
        return {
            "calls": [c.__dict__ for c in self.calls],
            "sessions": {
                s: {
                    "mode": self.modes[s],
                    "stop_to_settle_s": t,
                    "recovered_by_watchdog": self.recovered.get(s, False),
                }
                for s, t in self.settle_s.items()
            },
        }


def _stop_offsets(events: list[Event], session: str) -> tuple[int | None, int | None]:
    start = next(
        (
            e.mono_ns
            for e in events
            if e.session == session and e.kind in (names.STOP_CLICKED, names.ABORT_RPC_RECEIVED)
        ),
        None,
    )
    settled = next(
        (e.mono_ns for e in events if e.session == session and e.kind == names.TURN_SETTLED), None
    )
    return start, settled


async def run_demo(
    *,
    grace_s: float = 2.0,
    workdir: Path | None = None,
    sink: EventSink | None = None,
    pin_for_s: float = 1.5,
    recover: Callable[[Runtime, str], Any] | None = None,
    say: Callable[[str], None] = lambda _m: None,
) -> DemoReport:
    """Run the scenario; ``recover`` is the watchdog step for the pinned legacy session."""
    memory = MemorySink()
    out = FanOut(memory, sink) if sink is not None else memory
    report = DemoReport()
    tmp = Path(workdir or tempfile.mkdtemp(prefix="turnwatch-demo-"))
    say("generating a tree a Grep needs minutes to read")
    tree = await asyncio.to_thread(make_tree, tmp)
    host = LocalHost()
    adr = Runtime(host, grace_s=grace_s, sink=out, ask_permission=_prompt_for_writes)
    legacy = Runtime(host, mode=Mode.LEGACY, grace_s=grace_s, sink=out)

    say("session demo-adr: a long Grep, a Bash that ignores SIGTERM, a pending Write, a Write")
    turn = adr.start_turn("demo-adr")
    handles = {
        "Grep": turn.request("Grep", {"pattern": "TODO\\(stop\\)", "path": str(tree)}),
        "Bash": turn.request(
            "Bash",
            {"command": "trap '' TERM; (sleep 600 &); echo building; while :; do sleep 1; done"},
        ),
        "Write (permission pending)": turn.request(
            "Write", {"path": str(tmp / "never-approved.txt"), "content": "x"}
        ),
        "GenerateImages": turn.request(
            "GenerateImages", {"prompt": "a stop sign", "out": str(tmp / "stop.png"), "steps": 1000}
        ),
    }
    say("session demo-legacy (mode legacy): a long Grep")
    lturn = legacy.start_turn("demo-legacy")
    lgrep = lturn.request("Grep", {"pattern": "TODO\\(stop\\)", "path": str(tree)})
    await asyncio.sleep(0.5)  # let every call get going, as a user would before clicking Stop

    say("Stop clicked in both sessions")
    clicked = time.time()
    adr_stop = asyncio.ensure_future(adr.abort("demo-adr", clicked_at=clicked))
    legacy_stop = asyncio.ensure_future(legacy.abort("demo-legacy", clicked_at=clicked))
    await adr_stop
    say("demo-adr settled; demo-legacy is still pinned by its Grep")
    await asyncio.sleep(pin_for_s)
    pinned = not legacy_stop.done()
    if recover is not None and pinned:
        say("the watchdog finds demo-legacy pinned and runs the abort walk")
        await recover(legacy, "demo-legacy")
    else:
        await legacy.abort("demo-legacy", source="watchdog")
    await legacy_stop
    report.recovered["demo-legacy"] = pinned

    for label, h in [*handles.items(), ("Grep (legacy)", lgrep)]:
        res: ToolResult = await h.result()
        call = h._call
        sess = call.session
        start, _ = _stop_offsets(memory.events, sess)
        end = next(
            (
                e.mono_ns
                for e in memory.events
                if e.call == h.call_id
                and e.kind in (names.TOOL_FINISHED, names.TOOL_RESULT_DISCARDED)
            ),
            None,
        )
        report.calls.append(
            CallReport(
                sess,
                label,
                call.tool_class.value,
                call.policy.value,
                res.outcome.value,
                ((end or 0) - (start or 0)) / 1e9 if start and end else 0.0,
                detail=_detail(res),
            )
        )
    for rt, sess in ((adr, "demo-adr"), (legacy, "demo-legacy")):
        start, settled = _stop_offsets(memory.events, sess)
        report.settle_s[sess] = ((settled or 0) - (start or 0)) / 1e9
        report.modes[sess] = rt.mode.value
    report.events = memory.events
    return report


def _prompt_for_writes(tool: str, _cls: object) -> bool:
    return tool == "Write"


def _detail(res: ToolResult) -> str:
    if res.data and "terminated_by" in res.data:
        return f"terminated by {res.data['terminated_by']}"
    if res.output:
        return res.output.strip().splitlines()[-1][:60]
    return ""


if __name__ == "__main__":  # pragma: no cover - a developer's shortcut
    print(asyncio.run(run_demo(say=lambda m: print(m, file=sys.stderr))).to_json())
