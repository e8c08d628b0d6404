"""Debian's chromium, driven by Playwright (no browser download), and ``demo --web`` to drive."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/lib/chromium/chromium")
#: Where a test leaves what a person should look at (CI keeps it): the page after a stop.
ARTIFACTS = Path(os.environ.get("TURNWATCH_ARTIFACTS", "build/test-artifacts"))


def require_chromium() -> None:
    """Skip without Debian's chromium; where ``TURNWATCH_REQUIRE_CHROMIUM=1`` (CI), fail."""
    if CHROMIUM.exists():
        return
    if os.environ.get("TURNWATCH_REQUIRE_CHROMIUM") == "1":
        pytest.fail(
            f"TURNWATCH_REQUIRE_CHROMIUM=1 but {CHROMIUM} is missing (apt install chromium)"
        )
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")


@dataclass
class LiveDemo:
    """A running ``turnwatch demo --web``: its page's base URL, its ledger, its span output."""

    proc: subprocess.Popen[str]
    base: str
    ledger: Path
    spans_file: Path
    stderr: list[str] = field(default_factory=list)

    def spans(self) -> list[dict[str, Any]]:
        """The spans the console exporter printed (complete once the demo has exited)."""
        text, dec, i = self.spans_file.read_text(), json.JSONDecoder(), 0
        out: list[dict[str, Any]] = []
        while True:
            i = text.find("{", i)
            if i < 0:
                return out
            span, i = dec.raw_decode(text, i)
            out.append(span)


@contextmanager
def live_demo(tmp: Path, *, grace: float = 1.0) -> Iterator[LiveDemo]:
    """Start ``demo --web`` on a free port, spans to a file by the SDK's console exporter; on
    leaving, Ctrl-C it and wait for it to end (the spans are flushed on the way out)."""
    ledger = tmp / "ledger.sqlite3"
    argv = ["demo", "--web", "--web-addr", "127.0.0.1:0", "--ledger", str(ledger)]
    with serving(tmp, [*argv, "--grace", str(grace)], ledger) as demo:
        yield demo


@contextmanager
def serving(tmp: Path, args: list[str], ledger: Path) -> Iterator[LiveDemo]:
    """``turnwatch ARGS`` until it says where its live page is; Ctrl-C on leaving."""
    spans = tmp / "spans.jsonl"
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "200"}
    argv = [sys.executable, "-m", "turnwatch", *args]
    with spans.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    base = None
    while base is None:
        line = proc.stderr.readline()
        assert line or proc.poll() is None, "".join(lines)
        assert time.monotonic() < deadline, "".join(lines)
        lines.append(line)
        found = re.search(r"live page on (http://\S+)/", line)
        base = found.group(1) if found else None
    demo = LiveDemo(proc, base, ledger, spans, lines)
    try:
        yield demo
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        demo.stderr.append(proc.stderr.read())
        proc.stderr.close()


def stop_in_browser(page: Any, session: str) -> dict[str, Any]:
    """Click the session's Stop once it is processing; return what the page measured (its last
    idle, which is then cleared, so that the next stop of the same session waits for its own)."""
    page.wait_for_selector(
        f'tr[data-session="{session}"][data-state="processing"] button.stop:not([disabled])',
        timeout=60000,
    )
    page.click(f'button.stop[data-session="{session}"]')
    page.wait_for_function(
        "s => document.body.dataset.lastIdle && JSON.parse(document.body.dataset.lastIdle)"
        ".session === s",
        arg=session,
        timeout=60000,
    )
    measured: dict[str, Any] = json.loads(page.evaluate("document.body.dataset.lastIdle"))
    page.evaluate("delete document.body.dataset.lastIdle")
    return measured
