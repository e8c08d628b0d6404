"""The browser module (``web/turnwatch-stop.js``): its own tests in Node's test runner, and what
it sends read by turnwatch's event schema exactly as ``POST /v1/events`` reads it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from turnwatch import names
from turnwatch.tracing.eventsapi import parse_body

WEB = Path(__file__).resolve().parents[2] / "web"


def node() -> str:
    found = shutil.which("node")
    if found is None:
        if os.environ.get("TURNWATCH_REQUIRE_NODE"):
            pytest.fail("node is required here (TURNWATCH_REQUIRE_NODE is set)")
        pytest.skip("Node.js is not installed: the browser module's tests need node")
    return found


def test_the_modules_own_tests_pass_in_node() -> None:
    out = subprocess.run(
        [node(), "--test", "test/"], cwd=WEB, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    passed = re.search(r"^# pass (\d+)$", out.stdout, re.M)
    assert passed is not None, out.stdout
    assert int(passed.group(1)) >= 10, out.stdout  # never green having run none
    assert re.search(r"^# fail 0$", out.stdout, re.M)


SCRIPT = """
import { createStopTracer } from "./turnwatch-stop.js";
const bodies = [];
const tw = createStopTracer({
  fetch: async (url, init) => { bodies.push(init.body); return { ok: true, status: 200 }; },
  target: null,
});
const { traceparent } = tw.stopClicked({ session: "s 1", turn: "s 1.t1" });
tw.processingCleared({ session: "s 1" });
await tw.flush();
await tw.settled();
process.stdout.write(JSON.stringify({ traceparent, body: bodies.join("") }));
"""


def test_what_it_sends_is_what_the_endpoint_accepts() -> None:
    out = subprocess.run(
        [node(), "--input-type=module", "-e", SCRIPT],
        cwd=WEB,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    sent = json.loads(out.stdout)
    events, bad = parse_body(sent["body"].encode())
    assert bad == []
    assert [e.kind for e in events] == [names.STOP_CLICKED, names.PROCESSING_CLEARED]
    for e in events:
        assert e.attrs == {
            names.K_SOURCE: names.SOURCE_BROWSER,
            names.K_TRACEPARENT: sent["traceparent"],
        }
        assert (e.session, e.turn) == ("s 1", "s 1.t1")
        assert e.mono_ns is None  # the browser's clock is not the server's monotonic one
    assert 0 <= events[1].ts_unix - events[0].ts_unix < 5


def test_the_package_is_what_its_manifest_says() -> None:
    manifest = json.loads((WEB / "package.json").read_text())
    for file in manifest["files"]:
        assert (WEB / file).is_file(), file
    assert manifest["exports"]["."]["types"] == "./index.d.ts"
    types = (WEB / "index.d.ts").read_text()
    for name in ("createStopTracer", "stopClicked", "processingCleared", "flushOnUnload"):
        assert name in types
