"""The live page says what to do (#29 items 16 to 18), in Debian's chromium at 1280 and 800 px:
Stop only where it can work (elsewhere, why not), Recover for a pinned session (the CLI's
recovery: its plan listed and asked before it acts), pinned sessions first, idle ones folded
after 20 with a filter box, a clicked row's timeline brought into view, and what to act on on
screen at 800 px. Screenshots are kept as artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.cli.browser import ARTIFACTS, CHROMIUM, require_chromium, serving
from tests.conftest import Procs, turnwatch, wait_until
from tests.integrations.agent_arcs import DATA
from tests.watchdog.helpers import Recorder, spawn_tree

pytestmark = pytest.mark.timeout(300)

#: An agent CLI's session still processing (its file ends mid-turn): no endpoint to stop it by.
CLI_FILE = next(DATA.glob("claudecode/regressions/07-*/recordings/*/transcript.jsonl"))
CLI_SESSION = "db57d2ab-41c6-41bd-8c68-5c7ab400d493"


def ledger_with_everything(tmp: Path, procs: Procs) -> tuple[Path, list[psutil.Process]]:
    path = tmp / "ledger.sqlite3"
    assert turnwatch("ingest", str(CLI_FILE), "--ledger", str(path)).returncode == 0
    rec = Recorder(path)
    for i in range(30):  # idle ones, older than the rest
        rec("turn.started", f"idle-{i:02d}", 600 - i, turn=f"idle-{i:02d}.t1")
        rec("turn.settled", f"idle-{i:02d}", 599 - i, turn=f"idle-{i:02d}.t1")
        rec("processing.cleared", f"idle-{i:02d}", 599 - i, turn=f"idle-{i:02d}.t1")
    tree = spawn_tree(procs, marker="pinned/pinned.c1")
    rec.runtime(session="pinned")
    rec.aborted_turn(tree[0], session="pinned")
    rec.close()
    return path, tree


def right_edge(page: Any, selector: str) -> float:
    """Measured in the page in one step: the table is drawn again every poll, and an element
    found first and measured after may have been replaced meanwhile."""
    return float(page.locator(selector).evaluate("e => e.getBoundingClientRect().right"))


@pytest.mark.parametrize("width", [1280, 800])
def test_the_page_offers_what_can_work_and_recovers_a_pinned_session(
    tmp_path: Path, procs: Procs, width: int
) -> None:
    require_chromium()
    from playwright.sync_api import sync_playwright

    path, tree = ledger_with_everything(tmp_path, procs)
    args = ["serve", "--ledger", str(path), "--addr", "127.0.0.1:0", "--grace", "1"]
    with serving(tmp_path, args, path) as srv, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": 800})
            page.goto(srv.base + "/")
            page.wait_for_selector('tr[data-session="pinned"] button.recover')
            # Pinned first; the agent CLI's processing session next; then idle ones.
            order = page.eval_on_selector_all(
                "#sessions tbody tr[data-session]",
                "rs => rs.map(r => [r.dataset.session, r.dataset.state])",
            )
            # ("pinned" is recorded settled while its tree lives: idle, with a finding.)
            assert [s for s, _ in order[:2]] == ["pinned", CLI_SESSION], order
            assert all(st == "idle" for _, st in order[2:]), order
            # 16: no Stop where it cannot work; the reason instead.
            cli_row = f'tr[data-session="{CLI_SESSION}"]'
            assert page.locator(f"{cli_row} button.stop").count() == 0
            assert "stop it in its CLI" in page.inner_text(f"{cli_row} .no-stop")
            # 18: 20 idle sessions shown, the other 10 folded; the filter finds any of them.
            idle = 'tbody tr[data-session^="idle-"]'
            assert page.locator(idle).count() == 20
            assert "show 10 more idle" in page.inner_text("#show-idle")
            page.fill("#filter", "idle-00")
            wait_until(lambda: page.locator(idle).count() == 1, 10, "the filter")
            page.fill("#filter", "")
            wait_until(lambda: page.locator(idle).count() == 20, 10, "the filter cleared")
            # 18: what to act on is on screen, at 800 px too.
            assert right_edge(page, 'tr[data-session="pinned"] button.recover') <= width
            assert right_edge(page, "#sessions") <= width + 1
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"live-page-actions-{width}.png"), full_page=True)
            # 18: a row clicked far down brings its timeline into view.
            page.click('tr[data-session="idle-19"] td.id')
            page.wait_for_function(
                "() => document.querySelector('#tl-session').textContent.startsWith('idle-19')"
            )

            def in_view() -> bool:
                box = page.locator("#timeline").bounding_box()
                return box is not None and 0 <= box["y"] < 800

            wait_until(in_view, 10, "the timeline in view")
            # 17: Recover lists the plan and asks; accepted, it does what the CLI does.
            page.click('tr[data-session="pinned"] td.id')
            page.wait_for_selector("#tl-verdict code")
            assert "turnwatch recover pinned" in page.inner_text("#tl-verdict")
            asked: list[str] = []

            def answer(dialog: Any) -> None:
                asked.append(dialog.message)
                dialog.accept()

            page.on("dialog", answer)
            page.click('tr[data-session="pinned"] button.recover')
            page.wait_for_function(
                "() => (document.body.dataset.notice || '').startsWith('Recovered pinned')",
                timeout=60000,
            )
            assert len(asked) == 1
            assert "would terminate pid" in asked[0], asked

            def ended() -> bool:
                return all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in tree)

            wait_until(ended, 20, "the pinned tree ended")
            page.screenshot(
                path=str(ARTIFACTS / f"live-page-recovered-{width}.png"), full_page=True
            )
        finally:
            browser.close()
