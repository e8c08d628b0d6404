"""``turnwatch demo --web``: the demo's sessions left running until someone clicks Stop.

The live page (:mod:`turnwatch.cli.live.page`) is served with the metrics and ``POST /v1/events``
on one address. Three sessions run the field reports' tools on the real runtime: ``web-grep``
(a Grep that reads for minutes: read-only, raced and discarded), ``web-bash`` (a Bash that ignores
SIGTERM: process, the grace window), ``web-legacy`` (the same Grep in ``legacy`` mode: it pins,
and the real watchdog, running beside it, recovers it). A session stopped on the page starts a
new turn a few seconds after it went idle, so there is always something to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnwatch.cli.demo.scenario import BASH, GREP, make_tree
from turnwatch.cli.live.actions import recover_by_watchdog
from turnwatch.cli.live.page import LivePage
from turnwatch.cli.wiring import Wiring
from turnwatch.exporters import http
from turnwatch.runtime import LocalHost, Mode, Runtime
from turnwatch.runtime.model import StopSource
from turnwatch.tracing.eventsapi import PATH, EventsApp, recorder
from turnwatch.watchdog.loop import Watchdog
from turnwatch.watchdog.scan import Config, Finding

#: How long a stopped session stays idle on the page before its next turn starts.
RESTART_AFTER_S = 8.0
#: A smaller tree than the demo's: the page's Grep needs to run for a minute, not ten.
WEB_TREE_LINKS = 800


@dataclass
class _Session:
    runtime: Runtime
    tool: str
    args: dict[str, Any]


async def serve_live(
    wiring: Wiring,
    path: Path,
    workdir: Path,
    *,
    addr: str,
    grace_s: float,
    say: Callable[[str], None],
    restart_after_s: float = RESTART_AFTER_S,
    until: asyncio.Event | None = None,
) -> None:
    """Serve the page and run the sessions until ``until`` is set, SIGTERM arrives, or the task
    is cancelled (Ctrl-C); on the way out every session is stopped, the ADR's way."""
    until = until or asyncio.Event()
    with contextlib.suppress(RuntimeError, ValueError):  # only the main thread gets signals
        # A service manager's SIGTERM ends the demo as Ctrl-C does: nothing left running.
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, until.set)
    tree = str(workdir / "monorepo")  # made below, once the address is known to be free
    host = LocalHost()
    adr = Runtime(host, grace_s=grace_s, sink=wiring.telemetry)
    legacy = Runtime(host, mode=Mode.LEGACY, grace_s=grace_s, sink=wiring.telemetry)
    sessions = {
        "web-grep": _Session(adr, "Grep", {**GREP, "path": tree}),
        "web-bash": _Session(adr, "Bash", {"command": BASH}),
        "web-legacy": _Session(legacy, "Grep", {**GREP, "path": tree}),
    }
    loop = asyncio.get_running_loop()

    def stop(session: str, traceparent: str | None) -> str:
        s = sessions.get(session)
        if s is None:
            raise LookupError(f"unknown session {session!r}; sessions: {', '.join(sessions)}")
        fut = asyncio.run_coroutine_threadsafe(
            s.runtime.abort(session, source=StopSource.UI, traceparent=traceparent), loop
        )
        return fut.result(timeout=300).value

    findings: list[Finding] = []
    page = LivePage(
        path,
        stop,
        before_read=lambda: wiring.ledger.flush(timeout=5),
        findings=lambda: findings,
        can_stop=lambda r: None if r.session in sessions else "not one of this demo's sessions",
        recover=recover_by_watchdog(path, grace_s),
    )
    # The page's clicks and idles go through the demo's own pipeline, as the runtime's events.
    events = EventsApp(recorder(wiring.telemetry, wiring.ledger))
    routes: dict[str, http.WSGIApp] = {PATH: events, **page.routes()}
    server, port = http.serve(wiring.registry, addr, routes=routes)
    try:
        await asyncio.to_thread(make_tree, workdir, WEB_TREE_LINKS)  # its root is `tree`
    except BaseException:
        http.stop(server)
        await host.close()
        raise
    say(f"live page on {http.url(addr, port).removesuffix('/metrics')}/ (Ctrl-C to end)")
    run = f"{os.getpid():x}{int(time.time() * 1000) % 0xFFFF:04x}"
    turns = dict.fromkeys(sessions, 0)

    def start(name: str) -> None:
        s = sessions[name]
        turns[name] += 1
        turn = s.runtime.start_turn(name, f"{name}.{run}.t{turns[name]}")
        turn.request(s.tool, dict(s.args))

    for name in sessions:
        start(name)
    dog = Watchdog(
        path,
        wiring.ledger,
        functools.partial(wiring.ledger.flush, failing_wait_s=0.0),  # on the loop
        cfg=Config(grace_s=grace_s, rpc_stuck_s=1.5),
        runtime=legacy,
    )
    idle_since: dict[str, float] = {}
    try:
        while not until.is_set():
            await asyncio.sleep(0.5)
            await asyncio.to_thread(wiring.ledger.flush)  # the loop keeps answering stops
            findings[:] = (await dog.cycle()).findings
            now = time.monotonic()
            for name, s in sessions.items():
                if s.runtime.session(name).processing:
                    idle_since.pop(name, None)
                elif now - idle_since.setdefault(name, now) >= restart_after_s:
                    idle_since.pop(name)
                    start(name)
    finally:
        http.stop(server)
        for name, s in sessions.items():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(s.runtime.abort(name, source=StopSource.API), grace_s + 5)
        await host.close()
