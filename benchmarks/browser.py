"""The click, as the browser measures it: click → idle on the live page, in Debian's chromium.

The live page of ``demo --web`` (its sessions restarted at once after each stop) is opened in
chromium; Stop is clicked ``STOPS`` times for a read-only Grep and for a Bash that ignores SIGTERM
(a process tool: it ends at the grace window's SIGKILL). Beside the browser's click → idle (its
own clock at both ends) stands the server's stop → settle for the same stops (``agent.abort``
received → ``turn.settled``, from the ledger), and what the module itself costs in the page:
``stopClicked()`` called → its request handed to ``fetch``, ``processingCleared()`` called →
queued, and a beacon queued on unload.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.cli.browser import CHROMIUM, stop_in_browser

from benchmarks.common import fmt_s, median, table
from turnwatch import names
from turnwatch.cli.demo.web import serve_live
from turnwatch.cli.wiring import wire

STOPS = 8
GRACE_S = 1.0
MODULE_CALLS = 2000

# Chromium coarsens performance.now() (to 100 µs without cross-origin isolation): each cost is
# the time of a run of calls divided by their number, not a median of single calls.
_MODULE_COST = """async (n) => {
  const { createStopTracer } = await import("/web/turnwatch-stop.js");
  const tw = createStopTracer({
    fetch: () => new Promise(() => {}), sendBeacon: () => true,
    flushMs: 1e9, maxBatch: 1e9, target: null, onError: () => {},
  });
  const per = (f) => { const t0 = performance.now(); for (let i = 0; i < n; i++) f(i);
                       return (performance.now() - t0) / n; };
  const click = per((i) => tw.stopClicked({ session: "b" + i, turn: "t" }));
  const idle = per((i) => tw.processingCleared({ session: "b" + i }));
  const beacon = per((i) => { tw.processingCleared({ session: "u" + i }); tw.flushOnUnload(); });
  return { click, idle, beacon: beacon - idle };
}"""


def _serve(tmp: Path, ready: dict[str, Any]) -> None:
    path = tmp / "ledger.sqlite3"
    wiring = wire(path)

    async def run() -> None:
        until = asyncio.Event()
        loop = asyncio.get_running_loop()
        ready["stop"] = lambda: loop.call_soon_threadsafe(until.set)

        def say(message: str) -> None:
            if "live page on" in message:
                ready["base"] = message.split()[3].rstrip("/")
                ready["event"].set()

        await serve_live(
            wiring, path, tmp, addr="127.0.0.1:0", grace_s=GRACE_S, say=say,
            restart_after_s=0.0, until=until,
        )  # fmt: skip

    try:
        asyncio.run(run())
    finally:
        wiring.close()


def _server_side(ledger: Path, session: str) -> tuple[list[float], list[float]]:
    """Per stop clicked in the browser: click → agent.abort received (the request's way to the
    runtime: one host, so one clock), and agent.abort received → turn.settled (the server's)."""
    conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT turn, kind, ts_unix, attrs_json FROM events WHERE session = ? AND kind IN "
            "(?, ?, ?) ORDER BY seq",
            (session, names.STOP_CLICKED, names.ABORT_RPC_RECEIVED, names.TURN_SETTLED),
        ).fetchall()
    finally:
        conn.close()
    seen: dict[tuple[str, str], float] = {}
    for turn, kind, ts, attrs in rows:
        source = json.loads(attrs or "{}").get(names.K_SOURCE)
        if source in (names.SOURCE_BROWSER, "ui") or kind == names.TURN_SETTLED:
            seen.setdefault((turn, kind), ts)
    reach, settle = [], []
    for (turn, kind), ts in seen.items():
        if kind != names.ABORT_RPC_RECEIVED:
            continue
        click = seen.get((turn, names.STOP_CLICKED))
        settled = seen.get((turn, names.TURN_SETTLED))
        if click is not None:
            reach.append(ts - click)
        if settled is not None:
            settle.append(settled - ts)
    return reach, settle


def main() -> str:
    head = "## The click, in chromium: click → idle\n"
    if not CHROMIUM.exists():
        return head + f"\n(not measured: {CHROMIUM} is not installed)\n"
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="turnwatch-bench-") as tmp:
        ready: dict[str, Any] = {"event": threading.Event()}
        server = threading.Thread(target=_serve, args=(Path(tmp), ready), daemon=True)
        server.start()
        if not ready["event"].wait(120):
            raise RuntimeError("the live page did not start")
        base = ready["base"]
        rows = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
            try:
                page = browser.new_page()
                page.goto(base + "/")
                clicks: dict[str, list[float]] = {"web-grep": [], "web-bash": []}
                for _ in range(STOPS):
                    for session, took in clicks.items():
                        took.append(float(stop_in_browser(page, session)["stopToIdle"]))
                cost = page.evaluate(_MODULE_COST, MODULE_CALLS)
            finally:
                browser.close()
        ready["stop"]()
        server.join(60)
        ledger = Path(tmp) / "ledger.sqlite3"
        for label, session in (
            ("read-only (Grep)", "web-grep"),
            (f"process (Bash ignoring SIGTERM; grace {GRACE_S:g} s)", "web-bash"),
        ):
            reach, settle = _server_side(ledger, session)
            rows.append(
                [label, fmt_s(median(clicks[session])), fmt_s(median(reach)), fmt_s(median(settle))]
            )
    added = (cost["click"] + cost["idle"]) / 1000
    return "\n".join(
        [
            head,
            f"Median of {STOPS} stops each, clicked on `demo --web`'s page in chromium:\n",
            table(
                [
                    "tool",
                    "click → idle (browser)",
                    "click → agent.abort received",
                    "agent.abort → settled (server)",
                ],
                rows,
            ),
            "",
            f"The module in the page (mean of {MODULE_CALLS} calls): `stopClicked()` → its "
            f"request handed to fetch {fmt_s(cost['click'] / 1000)}, `processingCleared()` → "
            f"queued {fmt_s(cost['idle'] / 1000)}, a beacon queued on unload "
            f"{fmt_s(cost['beacon'] / 1000)}: the module adds {fmt_s(added)} to click → idle "
            f"(target ≤ 1 ms).",
            "",
        ]
    )


if __name__ == "__main__":
    print(main())
