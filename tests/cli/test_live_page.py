"""The click, traced from a real browser to idle: ``turnwatch demo --web`` in Debian's chromium.

Stop is clicked on the live page, for a read-only Grep and a SIGTERM-ignoring Bash. Then the
ledger must hold the browser's ``stop.clicked``, the runtime's ``agent.abort`` … ``turn.settled``
and the browser's ``processing.cleared``; ``turnwatch_stop_to_idle_seconds`` must have observed
each stop (measured by the browser's clock at both ends); and every span of the stop must be in
the click's trace, under the click. A screenshot of the page after the stops is kept.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import urllib.error
import urllib.request
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.cli.browser import (
    ARTIFACTS,
    CHROMIUM,
    LiveDemo,
    live_demo,
    require_chromium,
    serving,
    stop_in_browser,
)
from tests.conftest import RUN_TOKEN, Procs, wait_until
from tests.watchdog.test_cross_process import spawn_runtime
from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.runtime.tools.proctree import CALL_MARKER
from turnwatch.tracing.ledger import connect, read_events

pytestmark = pytest.mark.timeout(300)


def events(demo: LiveDemo, session: str) -> list[Event]:
    try:
        conn = connect(demo.ledger, readonly=True)
    except Exception:
        return []
    try:
        return [ev for _seq, ev in read_events(conn, session=session)]
    except sqlite3.Error:
        return []
    finally:
        conn.close()


def browser_idle(demo: LiveDemo, session: str) -> list[Event]:
    evs = events(demo, session)
    done = any(
        e.kind == names.PROCESSING_CLEARED and e.attrs.get(names.K_SOURCE) == names.SOURCE_BROWSER
        for e in evs
    )
    return evs if done else []


def web_processes() -> list[int]:
    """Live processes started by a call of the live demo (its calls' marker is in their env)."""
    out = []
    run = f"{RUN_TOKEN}={os.environ[RUN_TOKEN]}".encode()  # this test run's, not another's
    for pid in psutil.pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read()
                if f"{CALL_MARKER}=web-".encode() in env and run in env:
                    out.append(pid)
        except OSError:
            continue
    return out


def scrape(demo: LiveDemo) -> str:
    with urllib.request.urlopen(demo.base + "/metrics", timeout=10) as r:
        return str(r.read().decode())


def test_stop_clicked_in_chromium_is_traced_from_the_click_to_idle(tmp_path: Path) -> None:
    require_chromium()
    from playwright.sync_api import sync_playwright

    measured: dict[str, float] = {}
    with live_demo(tmp_path) as demo, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(demo.base + "/")
            for session in ("web-grep", "web-bash"):
                measured[session] = stop_in_browser(page, session)["stopToIdle"]
                page.click(f'tr[data-session="{session}"]')  # its timeline, below the table
            page.wait_for_selector("#tl-steps li")
            # The selected session's states as its user lived them, its stop counted.
            page.wait_for_function(
                "document.querySelector('#tl-arc-stops')?.textContent === '1 stop'"
            )
            states = page.eval_on_selector_all(
                "#tl-arc li[data-state]", "els => els.map(e => e.dataset.state)"
            )
            assert states == ["ready", "working", "ready"]
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "live-page-after-stop.png"), full_page=True)
            # The legacy session pins until the watchdog beside it recovers it; its idle is
            # still queued when the page is left at once: sendBeacon carries it on unload.
            page.goto(demo.base + "/?flush_ms=600000")
            legacy = stop_in_browser(page, "web-legacy")["stopToIdle"]
            assert page.evaluate("window.turnwatchStop.pending") == 1
            # A page of another origin cannot post events (its preflight is refused): nothing
            # stored. (localhost and 127.0.0.1 are two origins to a browser.)
            foreign = demo.base.replace("127.0.0.1", "localhost")
            page.goto(foreign + "/web/live.html")
            refused = page.evaluate(
                """async (url) => {
                    try {
                        const r = await fetch(url, {method: "POST", body: '{"ts": 1, "kind":'
                          + ' "stop.clicked", "session": "evil"}\\n',
                          headers: {"Content-Type": "application/x-ndjson"}});
                        return r.status;
                    } catch (e) { return "blocked"; }
                }""",
                demo.base + "/v1/events",
            )
            assert refused == "blocked"
            wait_until(partial(browser_idle, demo, "web-legacy"), 30, "the beacon's idle")
            for session in measured:
                wait_until(partial(browser_idle, demo, session), 30, f"{session}: its idle")
        finally:
            browser.close()
        text = scrape(demo)
        assert events(demo, "evil") == []
    # The demo has exited: its spans are flushed, and nothing of its calls is left running.
    assert web_processes() == []
    spans = demo.spans()
    for session, stop_to_idle in measured.items():
        _check_stop(session, stop_to_idle, events(demo, session), spans)
    idle = [e for e in events(demo, "web-legacy") if e.kind == names.PROCESSING_CLEARED]
    assert idle[-1].attrs[names.K_SOURCE] == names.SOURCE_BROWSER  # by the beacon
    assert legacy > 1.0  # pinned until the watchdog's walk
    sources = [e.attrs.get(names.K_SOURCE) for e in events(demo, "web-legacy")]
    assert "watchdog" in sources
    count = [ln for ln in text.splitlines() if ln.startswith(names.M_STOP_TO_IDLE + "_count")]
    # Each stop observed once (by the browser's idle, or the server's when the click came late).
    assert any('mode="adr"' in ln and float(ln.split()[-1]) == 2 for ln in count), count


def _check_stop(
    session: str, stop_to_idle: float, evs: list[Event], spans: list[dict[str, Any]]
) -> None:
    click = next(
        e
        for e in evs
        if e.kind == names.STOP_CLICKED and e.attrs.get(names.K_SOURCE) == names.SOURCE_BROWSER
    )
    turn = click.turn
    mine = [e for e in evs if e.turn == turn]
    kinds = [e.kind for e in mine]
    for kind in (
        names.ABORT_RPC_RECEIVED,
        names.ABORT_WALK_STARTED,
        names.TOOLS_ABORT_SENT,
        names.TURN_SETTLED,
        names.ABORT_RPC_RETURNED,
    ):
        assert kind in kinds, (session, kinds)
    idle = [
        e
        for e in mine
        if e.kind == names.PROCESSING_CLEARED
        and e.attrs.get(names.K_SOURCE) == names.SOURCE_BROWSER
    ]
    assert len(idle) == 1, kinds
    # Stop → idle on the browser's clock at both ends, as the page showed it.
    assert idle[0].ts_unix - click.ts_unix == pytest.approx(stop_to_idle, abs=1e-3)
    settled = next(e for e in mine if e.kind == names.TURN_SETTLED)
    assert click.ts_unix <= settled.ts_unix + 0.05 <= idle[0].ts_unix + 0.1  # one host's clocks

    tp = str(click.attrs[names.K_TRACEPARENT])
    _v, trace_id, click_span, _f = tp.split("-")
    rpc = next(e for e in mine if e.kind == names.ABORT_RPC_RECEIVED)
    assert rpc.attrs[names.K_TRACEPARENT] == tp  # the page passed the click's trace along
    stop_path = [e for e in mine if e.kind in names.STOP_PATH_KINDS]
    strays = [(e.kind, e.trace_id) for e in stop_path if e.trace_id != trace_id]
    assert strays == []

    in_trace = [s for s in spans if s["context"]["trace_id"] == "0x" + trace_id]
    by_id = {s["context"]["span_id"]: s for s in in_trace}
    (root,) = [s for s in in_trace if s["name"] == names.SPAN_STOP]
    assert root["parent_id"] == "0x" + click_span  # the click is the trace's root
    assert {s["name"] for s in in_trace} >= {
        names.SPAN_STOP,
        names.SPAN_AGENT_ABORT,
        names.SPAN_ABORT_WALK,
        names.SPAN_TOOLS_ABORT,
        names.SPAN_TURN_SETTLE,
    }
    for s in in_trace:  # every span of the stop descends from the click's
        node = s
        while node["parent_id"] != "0x" + click_span:
            node = by_id[node["parent_id"]]
    # The root starts at the click when the click reached the server first, else at agent.abort.
    first = click if mine.index(click) < mine.index(rpc) else rpc
    start = datetime.fromisoformat(root["start_time"]).timestamp()
    assert start == pytest.approx(first.ts_unix, abs=1e-3)


def test_serve_stops_another_processs_runtime_from_the_page(tmp_path: Path, procs: Procs) -> None:
    """``turnwatch serve`` over the ledger of a runtime in another process: Stop on its page
    reaches that runtime through its control socket, with the click's trace and the token."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    ledger, token = tmp_path / "ledger.sqlite3", tmp_path / "token"
    token.write_text("s3cret\n")
    runtime = spawn_runtime(
        procs, ledger, tmp_path / "rt.sock", "adr", "Bash", {"command": "sleep 600"}, stop=False
    )
    args = ["serve", "--ledger", str(ledger), "--addr", "127.0.0.1:0", "--token-file", str(token)]
    try:
        with serving(tmp_path, args, ledger) as srv, sync_playwright() as pw:
            # Without the token, or from another origin, nothing is stopped.
            stop_url = srv.base + "/api/sessions/far/stop"
            assert _post(stop_url, {}) == 401
            headers = {"Authorization": "Bearer s3cret", "Origin": "http://evil.example"}
            assert _post(stop_url, headers) == 403
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
            try:
                page = browser.new_page()
                page.goto(srv.base + "/")  # no token: Stop is refused, and the page says so
                sel = 'tr[data-session="far"][data-state="processing"] button.stop:not([disabled])'
                page.click(sel)
                page.wait_for_selector("#error:not([hidden])")
                assert "401" in page.inner_text("#error")
                page.wait_for_selector(sel)  # the session is still running, Stop clickable
                page.goto(srv.base + "/#token=s3cret")
                took = stop_in_browser(page, "far")["stopToIdle"]
                # The page batches its idle for 250 ms: wait for it before closing the browser.
                wait_until(partial(browser_idle, srv, "far"), 30, "the browser's idle")
            finally:
                browser.close()
            wait_until(
                lambda: "turnwatch_stop_to_idle_seconds_count" in scrape(srv), 10, "the metric"
            )
            text = scrape(srv)
        evs = events(srv, "far")
        click = next(e for e in evs if e.kind == names.STOP_CLICKED)
        rpc = next(e for e in evs if e.kind == names.ABORT_RPC_RECEIVED)
        assert click.attrs[names.K_SOURCE] == names.SOURCE_BROWSER
        assert rpc.attrs[names.K_SOURCE] == "ui"
        assert rpc.attrs[names.K_TRACEPARENT] == click.attrs[names.K_TRACEPARENT]
        assert [e.attrs.get("outcome") for e in evs if e.kind == names.TURN_SETTLED] == ["aborted"]
        idle = [e for e in evs if e.kind == names.PROCESSING_CLEARED]
        assert idle[-1].attrs[names.K_SOURCE] == names.SOURCE_BROWSER
        assert idle[-1].ts_unix - click.ts_unix == pytest.approx(took, abs=1e-3)
        count = [ln for ln in text.splitlines() if ln.startswith(names.M_STOP_TO_IDLE + "_count")]
        assert [float(ln.split()[-1]) for ln in count] == [1.0], count
    finally:
        runtime.kill()
        runtime.wait()
        assert runtime.stdout is not None
        runtime.stdout.close()


def _post(url: str, headers: dict[str, str]) -> int:
    req = urllib.request.Request(url, method="POST", headers=headers, data=b"")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_a_service_managers_sigterm_ends_the_live_demo_leaving_nothing(tmp_path: Path) -> None:
    """``demo --web`` under systemd or ``timeout`` gets SIGTERM, not Ctrl-C: its sessions are
    stopped the ADR's way all the same (the Bash that ignores SIGTERM included)."""
    with live_demo(tmp_path) as demo:
        wait_until(lambda: len(web_processes()) >= 2, 60, "the demo's Bash and its sleep")
        demo.proc.send_signal(signal.SIGTERM)
        assert demo.proc.wait(timeout=60) == 0
    assert web_processes() == []
    settled = [e for e in events(demo, "web-bash") if e.kind == names.TURN_SETTLED]
    assert [e.attrs.get(names.K_OUTCOME) for e in settled] == ["aborted"]


def test_a_batch_the_page_sends_again_is_kept_once(tmp_path: Path) -> None:
    """A page going away sends again, by beacon, a batch whose fetch it never saw answered (the
    fetch may have arrived): the demo's events endpoint keeps each event once."""
    batch = (
        b'{"ts": 1790000000.25, "kind": "processing.cleared", "session": "web-x", "turn": "t1",'
        b' "attrs": {"source": "browser"}}\n'
    )
    with live_demo(tmp_path) as demo:
        for _ in range(2):
            req = urllib.request.Request(
                demo.base + "/v1/events",
                data=batch,
                headers={"Content-Type": "text/plain"},  # as a beacon sends it
                method="POST",
            )
            with urllib.request.urlopen(req, timeout=30) as r:
                assert r.status == 200
        kept = [e for e in events(demo, "web-x") if e.kind == names.PROCESSING_CLEARED]
        assert len(kept) == 1
