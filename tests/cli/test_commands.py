"""Each command and its error paths through CliRunner; the installed script as a subprocess."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import Procs, wait_until
from tests.streams import four_states, write
from tests.watchdog.helpers import aborted_tree
from turnwatch.cli.app import app
from turnwatch.runtime import LocalHost, Runtime
from turnwatch.tracing.ledger import Ledger

runner = CliRunner()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    db = tmp_path / "ledger.sqlite3"
    src = write(tmp_path / "e.jsonl", four_states())
    assert runner.invoke(app, ["ingest", str(src), "--ledger", str(db)]).exit_code == 0
    return db


def test_demo_json_outcomes() -> None:
    result = runner.invoke(app, ["demo", "--grace", "0.8", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    calls = {c["tool"]: c for c in data["calls"]}
    # Read-only calls settled without waiting for the Grep ...
    assert calls["Grep"]["outcome"] == "discarded"
    assert calls["Grep"]["stop_to_release_s"] < data["sessions"]["demo-adr"]["stop_to_settle_s"]
    # ... the Bash tree is dead, within its window ...
    assert calls["Bash"]["outcome"] == "aborted"
    assert "building" in calls["Bash"]["detail"] or "SIGKILL" in calls["Bash"]["detail"]
    # ... the Write in progress was awaited, the pending one never started nor approved ...
    assert calls["Write (in progress)"]["outcome"] == "completed_after_stop"
    assert calls["Write (permission pending)"]["started"] is False
    assert data["late_approval"] == "late"
    # ... the MCP call was awaited until its server's late reply ...
    assert calls["MCP deploy"]["outcome"] == "completed_after_stop"
    assert calls["MCP deploy"]["tool_class"] == "extension"
    # ... the legacy session pinned, then the watchdog recovered it ...
    assert data["sessions"]["demo-legacy"]["recovered_by_watchdog"] is True
    # ... and no process is left.
    assert data["leftover_pids"] == []
    for c in data["calls"]:
        if c["pid"]:
            assert (
                not Path(f"/proc/{c['pid']}").exists()
                or "Z" in Path(f"/proc/{c['pid']}/stat").read_text().split(")")[1][:3]
            )


def test_explain_text_json_and_svg(ledger: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["explain", "pinned", "--ledger", str(ledger)])
    assert result.exit_code == 0, result.output
    assert "Stop clicked" in result.stdout
    assert "What still holds the session" in result.stdout
    assert f"turnwatch recover pinned --ledger {ledger}" in result.stdout
    as_json = json.loads(
        runner.invoke(app, ["explain", "p1", "--json", "--ledger", str(ledger)]).stdout
    )
    assert as_json["session"] == "pinned"
    assert as_json["state"] == "pinned"
    assert {f["kind"] for f in as_json["findings"]} >= {"pinned_session"}
    svg = tmp_path / "stop.svg"
    assert (
        runner.invoke(
            app, ["explain", "pinned", "--svg", str(svg), "--ledger", str(ledger)]
        ).exit_code
        == 0
    )
    assert svg.read_text().startswith("<svg")


def test_unknown_session_names_the_closest_first(ledger: Path) -> None:
    result = runner.invoke(app, ["explain", "pinnd", "--ledger", str(ledger)])
    assert result.exit_code == 2
    assert re.search(r"unknown session or turn 'pinnd'; sessions: pinned, ", result.stderr)
    assert runner.invoke(app, ["recover", "nope", "--ledger", str(ledger)]).exit_code == 2


def test_recover_dry_run_and_refusal_without_a_terminal(ledger: Path) -> None:
    dry = runner.invoke(app, ["recover", "pinned", "--dry-run", "--ledger", str(ledger)])
    assert dry.exit_code == 0, dry.output
    assert "would" in dry.stdout
    refused = runner.invoke(app, ["recover", "pinned", "--ledger", str(ledger)])
    assert refused.exit_code == 2
    assert "without --yes" in refused.stderr


def test_recover_yes_terminates_the_recorded_tree(tmp_path: Path, procs: Procs) -> None:
    db = tmp_path / "ledger.sqlite3"
    aborted_tree(db, procs)
    result = runner.invoke(app, ["recover", "s", "--yes", "--grace", "0.3", "--ledger", str(db)])
    assert result.exit_code == 0, result.output
    assert "would terminate" in result.stdout  # said before it was done
    assert "→ ok" in result.stdout
    assert procs.alive() == []


def test_watch_once_json_exit_codes(ledger: Path, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["watch", "--once", "--no-recover", "--json", "--ledger", str(ledger)]
    )
    assert result.exit_code == 1  # findings remain
    rows = json.loads(result.stdout)
    assert {"kind", "session", "turn", "call", "pid", "action"} <= set(rows[0])
    assert {r["kind"] for r in rows} >= {"pinned_session", "abort_rpc_stuck"}
    assert "stopping" not in {r["session"] for r in rows}  # stopped 1 s ago: not pinned yet ...
    sooner = runner.invoke(
        app,
        [
            "watch",
            "--once",
            "--no-recover",
            "--json",
            "--pinned-after",
            "0.5",
            "--ledger",
            str(ledger),
        ],
    )
    assert "stopping" in {r["session"] for r in json.loads(sooner.stdout)}  # ... with 0.5 s, it is
    clean = tmp_path / "clean.sqlite3"
    src = write(tmp_path / "idle.jsonl", four_states()[:7])  # runtime rows and the idle turn
    runner.invoke(app, ["ingest", str(src), "--ledger", str(clean)])
    ok = runner.invoke(app, ["watch", "--once", "--json", "--ledger", str(clean)])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout) == []


def test_installed_console_script_and_module(ledger: Path, tmp_path: Path) -> None:
    exe = shutil.which("turnwatch", path=str(Path(sys.executable).parent))
    assert exe is not None, "the console script is installed with the package"
    out = subprocess.run(
        [exe, "sessions", "--json", "--ledger", str(ledger)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert {r["session"] for r in json.loads(out.stdout)} == {"idle", "busy", "stopping", "pinned"}
    mod = subprocess.run(
        [sys.executable, "-m", "turnwatch", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    for command in ("demo", "sessions", "explain", "recover", "watch", "ingest", "serve-metrics"):
        assert command in mod.stdout


def test_serve_metrics_rebuilds_from_the_ledger_and_follows(
    ledger: Path, tmp_path: Path, procs: Procs
) -> None:
    exe = shutil.which("turnwatch", path=str(Path(sys.executable).parent))
    assert exe is not None
    log = tmp_path / "serve.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [
                exe,
                "serve-metrics",
                "--ledger",
                str(ledger),
                "--poll",
                "0.1",
                "--metrics-addr",
                "127.0.0.1:0",
            ],
            stderr=fh,
        )
    procs.popens.append(proc)
    procs.track(proc.pid)
    wait_until(lambda: "serving http" in log.read_text(), what="the endpoint")
    url = re.search(r"(http://\S+/metrics)", log.read_text()).group(1)  # type: ignore[union-attr]

    def stops() -> float:
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = resp.read().decode()
        m = re.search(r'^turnwatch_stops_total\{mode="adr"\} (\S+)$', body, re.M)
        return float(m.group(1)) if m else 0.0

    assert stops() == 2.0  # rebuilt: the stopping and the pinned sessions' stops
    now = time.time()
    more = write(
        tmp_path / "more.jsonl",
        [json.dumps({"ts": now, "kind": "stop.clicked", "session": "busy", "turn": "b1"})],
    )
    assert runner.invoke(app, ["ingest", str(more), "--ledger", str(ledger)]).exit_code == 0
    wait_until(lambda: stops() == 3.0, what="the new stop to be followed")
    proc.terminate()
    proc.wait(timeout=10)


def test_every_listing_and_command_takes_ledger() -> None:
    for command in ("demo", "sessions", "explain", "recover", "watch", "ingest", "serve-metrics"):
        result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert "--ledger" in result.stdout, command
    for listing in ("sessions", "explain", "watch", "demo"):
        assert "--json" in runner.invoke(app, [listing, "--help"], env={"COLUMNS": "200"}).stdout


def test_help_does_not_import_heavy_modules() -> None:
    code = (
        "import sys; from turnwatch.cli.app import app; "
        "print(any(m.startswith(('opentelemetry.sdk', 'psutil')) for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ}
    )
    assert out.stdout.strip() == "False"


async def test_sessions_and_explain_show_containment_and_what_a_call_left_running(
    tmp_path: Path, procs: Procs
) -> None:
    db = tmp_path / "ledger.sqlite3"
    sink = Ledger(db)
    host = LocalHost()
    rt = Runtime(host, grace_s=0.5, sink=sink)
    turn = rt.start_turn("bg")
    call = turn.request("Bash", {"command": "sleep 300 >/dev/null 2>&1 & echo $!"})
    child = procs.track(int((await call.result()).output.split()[0]))
    await turn.finish()
    sink.close()

    listed = runner.invoke(app, ["sessions", "--json", "--ledger", str(db)])
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.stdout)
    assert row["live_processes"] == 1
    (c,) = row["calls"]
    assert c["containment"] == host.containment
    assert c["lingering"] == [child.pid]
    explained = runner.invoke(app, ["explain", "bg", "--json", "--ledger", str(db)])
    assert explained.exit_code == 0, explained.output
    assert [t["containment"] for t in json.loads(explained.stdout)["tools"]] == [host.containment]
    shown = runner.invoke(app, ["explain", "bg", "--ledger", str(db)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert {"cgroup": "cgroup", "process_group": "group"}[host.containment] in shown.stdout
