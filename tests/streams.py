"""Recorded JSON-line streams, as a foreign runtime would write them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import psutil


def line(ts: float, kind: str, session: str, **kw: Any) -> str:
    return json.dumps({"ts": ts, "kind": kind, "session": session, **kw})


def four_states(now: float | None = None) -> list[str]:
    """idle, processing, stopping and pinned (a stop whose RPC never returned) sessions.

    The runtime is this test process: alive, so only the stop timings decide the states.
    """
    now = time.time() if now is None else now
    old = now - 600
    me = psutil.Process()
    rt = {"pid": me.pid, "create_time": me.create_time(), "mode": "adr"}
    out = []
    for s in ("idle", "busy", "stopping", "pinned"):
        out.append(line(old, "runtime.started", s, attrs=rt))
    # idle: a turn that completed
    out += [
        line(old + 1, "turn.started", "idle", turn="i1"),
        line(old + 2, "turn.settled", "idle", turn="i1", attrs={"outcome": "completed"}),
        line(old + 2, "processing.cleared", "idle", turn="i1"),
    ]
    # busy: a Grep running, no stop
    out += [
        line(now - 5, "turn.started", "busy", turn="b1"),
        line(now - 5, "tool.requested", "busy", turn="b1", call="c1", tool="Grep"),
        line(now - 5, "tool.started", "busy", turn="b1", call="c1", tool="Grep"),
    ]
    # stopping: stop clicked a second ago, RPC pending
    out += [
        line(now - 9, "turn.started", "stopping", turn="s1"),
        line(now - 8, "tool.requested", "stopping", turn="s1", call="c1", tool="Write"),
        line(now - 8, "tool.started", "stopping", turn="s1", call="c1", tool="Write"),
        line(now - 1, "stop.clicked", "stopping", turn="s1"),
        line(now - 1, "abort.rpc.received", "stopping", turn="s1", attrs={"source": "ui"}),
    ]
    # pinned: stop ten minutes ago, the RPC never returned (the field report)
    out += [
        line(old, "turn.started", "pinned", turn="p1"),
        line(old, "tool.requested", "pinned", turn="p1", call="c1", tool="Grep"),
        line(old, "tool.started", "pinned", turn="p1", call="c1", tool="Grep"),
        line(old + 1, "stop.clicked", "pinned", turn="p1"),
        line(old + 1, "abort.rpc.received", "pinned", turn="p1", attrs={"source": "ui"}),
    ]
    return out


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def ledger(path: Path) -> Path:
    """A ledger at ``path`` holding :func:`four_states`, ingested as a foreign runtime's."""
    from turnwatch.tracing.ingest import ingest
    from turnwatch.tracing.ledger import Ledger

    led = Ledger(path)
    with write(path.with_suffix(".jsonl"), four_states()).open("rb") as f:
        ingest(f, led.append)
    led.close()
    return path
