"""The live page's session rows read as `turnwatch sessions` does: how long ago, by the server's
clock, and which calls run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.browser import CHROMIUM, require_chromium, serving
from tests.watchdog.helpers import Recorder
from turnwatch import names

pytestmark = pytest.mark.timeout(300)


def cells(tmp_path: Path, ledger: Path, column: str, sessions: tuple[str, ...]) -> dict[str, str]:
    """The live page over ``ledger``, in Chromium: each of ``sessions``' ``column`` cell."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    args = ["serve", "--ledger", str(ledger), "--addr", "127.0.0.1:0"]
    with serving(tmp_path, args, ledger) as srv, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(srv.base + "/")
            for s in sessions:
                page.wait_for_selector(f'tr[data-session="{s}"]')
            return {s: page.inner_text(f'tr[data-session="{s}"] td.{column}') for s in sessions}
        finally:
            browser.close()


def test_the_page_says_days_and_a_clock_ahead_as_the_sessions_command_does(tmp_path: Path) -> None:
    """A session pinned for three days read "4381 min ago", and one whose runtime's clock runs
    two hours fast "0 s ago", fresh: the on-call engineer's first reading of both was wrong. The
    page now shows the server's reading (``tracing.ages.ago``, the command's): the server's
    clock, not the browser's, is the one the recorded times are read against."""
    ledger = tmp_path / "ledger.sqlite3"
    rec = Recorder(ledger)
    rec(names.TURN_STARTED, "days", ago=3 * 86_400 + 60, turn="days.t1")
    rec(names.TURN_STARTED, "ahead", ago=-(2 * 3600 + 30), turn="ahead.t1")
    rec(names.TURN_STARTED, "fresh", ago=5, turn="fresh.t1")
    rec.close()
    shown = cells(tmp_path, ledger, "col-since", ("days", "ahead", "fresh"))
    assert shown["days"] == "3 d ago"
    assert shown["ahead"] == "2 h 0 min ahead"
    assert shown["fresh"] in {f"{n} s ago" for n in range(5, 60)}


def test_the_page_counts_only_calls_that_began_as_running(tmp_path: Path) -> None:
    """A call waiting for its user's answer was counted "running": the on-call engineer then
    looks for a process that does not exist, rather than for the user who must answer."""
    ledger = tmp_path / "ledger.sqlite3"
    rec = Recorder(ledger)
    rec(names.TURN_STARTED, "asking", ago=30, turn="asking.t1")
    rec(names.TOOL_REQUESTED, "asking", ago=30, turn="asking.t1", call="w", tool="Write")
    rec(names.PERMISSION_REQUESTED, "asking", ago=30, turn="asking.t1", call="w", tool="Write")
    rec(names.TOOL_REQUESTED, "asking", ago=30, turn="asking.t1", call="g", tool="Grep")
    rec(names.TOOL_STARTED, "asking", ago=29, turn="asking.t1", call="g", tool="Grep")
    rec.close()
    shown = cells(tmp_path, ledger, "col-calls", ("asking",))["asking"]
    assert shown == "1 running, 1 awaiting permission of 2"
