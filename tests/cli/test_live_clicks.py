"""A click is a press and a release, and the live page polls twice a second. It drew its table
anew at each poll, and chromium sends no click when the element pressed left the page before
the release, even to come back: a row or a Stop pressed as a poll was answered did nothing. In
Debian's chromium: the press, the page's next poll answered, the release. Text selected in the
table (a session id, to copy) went the same way at the next poll."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.browser import CHROMIUM, live_demo, require_chromium, serving
from tests.watchdog.helpers import Recorder

pytestmark = pytest.mark.timeout(300)


def ledger_of_idle_sessions(tmp: Path, n: int) -> Path:
    path = tmp / "ledger.sqlite3"
    rec = Recorder(path)
    for i in range(n):
        rec("turn.started", f"idle-{i:02d}", 600 - i, turn=f"idle-{i:02d}.t1")
        rec("turn.settled", f"idle-{i:02d}", 599 - i, turn=f"idle-{i:02d}.t1")
        rec("processing.cleared", f"idle-{i:02d}", 599 - i, turn=f"idle-{i:02d}.t1")
    rec.close()
    return path


def press_across_a_poll(page: Any, selector: str) -> None:
    """Press on ``selector``'s middle, wait for the page's next poll to be answered, release."""
    # Measured in the page in one step: the table is drawn anew every poll, and an element
    # found first and measured after may have been replaced meanwhile.
    x, y = page.locator(selector).evaluate(
        "e => { const r = e.getBoundingClientRect();"
        " return [r.x + r.width / 2, r.y + r.height / 2]; }"
    )
    page.mouse.move(x, y)
    page.mouse.down()
    with page.expect_response(lambda r: r.url.endswith("/api/sessions"), timeout=10000):
        pass
    page.mouse.up()


@contextlib.contextmanager
def page_over_idle_sessions(tmp: Path) -> Iterator[Any]:
    """The live page in chromium, served over a ledger of five idle sessions."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    path = ledger_of_idle_sessions(tmp, 5)
    args = ["serve", "--ledger", str(path), "--addr", "127.0.0.1:0"]
    with serving(tmp, args, path) as srv, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(srv.base + "/")
            yield page
        finally:
            browser.close()


def test_a_row_clicked_across_a_poll_shows_its_timeline(tmp_path: Path) -> None:
    with page_over_idle_sessions(tmp_path) as page:
        page.wait_for_function("() => document.querySelector('#tl-session').textContent")
        shown = page.inner_text("#tl-session")
        # Three rows in turn, none the one shown first.
        others = [s for s in ("idle-03", "idle-01", "idle-02", "idle-00") if s not in shown]
        for session in others[:3]:
            press_across_a_poll(page, f'tr[data-session="{session}"] td.id >> nth=0')
            page.wait_for_function(
                f"() => document.querySelector('#tl-session').textContent.startsWith('{session}')",
                timeout=5000,
            )


def test_a_stop_pressed_across_a_poll_stops_the_session(tmp_path: Path) -> None:
    require_chromium()
    from playwright.sync_api import sync_playwright

    with live_demo(tmp_path) as demo, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(demo.base + "/")
            stop = 'tr[data-session="web-grep"][data-state="processing"] button.stop'
            page.wait_for_selector(f"{stop}:not([disabled])", timeout=60000)
            press_across_a_poll(page, stop)
            page.wait_for_selector('tr[data-session="web-grep"][data-state="idle"]', timeout=30000)
        finally:
            browser.close()


def test_a_session_id_selected_in_the_table_stays_selected_across_polls(tmp_path: Path) -> None:
    """On call, the session id is copied from the table (for ``turnwatch explain``): a table
    drawn anew at each poll took the selection away within half a second."""
    with page_over_idle_sessions(tmp_path) as page:
        page.wait_for_selector('tr[data-session="idle-02"] td.id')
        page.evaluate(
            "() => getSelection().selectAllChildren("
            "document.querySelector('tr[data-session=\"idle-02\"] td.id'))"
        )
        assert page.evaluate("() => getSelection().toString()") == "idle-02"
        # Two redraws at least: the status line says the second of each, polls come twice a
        # second, so it changes at least once a second.
        for _ in range(2):
            status = page.inner_text("#status")
            page.wait_for_function(
                "s => document.querySelector('#status').textContent !== s",
                arg=status,
                timeout=10000,
            )
        assert page.evaluate("() => getSelection().toString()") == "idle-02"
