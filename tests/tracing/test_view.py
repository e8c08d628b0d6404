"""sessions --json judges idle, processing, stopping and pinned on a recorded stream."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tests.streams import four_states, write
from turnwatch.cli.app import app

runner = CliRunner()


def test_sessions_json_judges_each_state(tmp_path: Path) -> None:
    src = write(tmp_path / "e.jsonl", four_states())
    db = tmp_path / "ledger.sqlite3"
    assert runner.invoke(app, ["ingest", str(src), "--ledger", str(db)]).exit_code == 0
    result = runner.invoke(app, ["sessions", "--json", "--ledger", str(db)])
    assert result.exit_code == 0, result.output
    rows = {r["session"]: r for r in json.loads(result.stdout)}
    assert {s: r["state"] for s, r in rows.items()} == {
        "idle": "idle",
        "busy": "processing",
        "stopping": "stopping",
        "pinned": "pinned",
    }
    for r in rows.values():
        assert {"session", "state", "turn", "since", "findings"} <= set(r)
    assert rows["pinned"]["turn"] == "p1"
    assert "pinned_session" in rows["pinned"]["findings"]
    assert "abort_rpc_stuck" in rows["pinned"]["findings"]
    assert rows["stopping"]["findings"] == []
    pinned = runner.invoke(app, ["sessions", "--pinned", "--json", "--ledger", str(db)])
    assert [r["session"] for r in json.loads(pinned.stdout)] == ["pinned"]


def test_sessions_table_renders(tmp_path: Path) -> None:
    src = write(tmp_path / "e.jsonl", four_states())
    db = tmp_path / "ledger.sqlite3"
    runner.invoke(app, ["ingest", str(src), "--ledger", str(db)])
    result = runner.invoke(app, ["sessions", "--ledger", str(db)], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    # Each session's row, cell by cell: its state column, not its name, says "pinned".
    rows = {}
    for line in result.stdout.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) == 7 and cells[0] in ("idle", "busy", "stopping", "pinned"):
            rows[cells[0]] = cells
    assert {s: r[1] for s, r in rows.items()} == {
        "idle": "idle",
        "busy": "processing",
        "stopping": "stopping",
        "pinned": "pinned",
    }
    assert rows["pinned"][6] == "pinned_session, abort_rpc_stuck"
    assert rows["idle"][6] == "-"


def test_missing_ledger_is_exit_2_naming_the_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["sessions", "--ledger", str(tmp_path / "nope.sqlite3")])
    assert result.exit_code == 2
    assert "nope.sqlite3: no ledger here" in result.stderr
