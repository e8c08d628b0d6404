"""Every option of every command, given values no one means: never a traceback, never a hang.

The commands and their options are read from the app itself, so a new option is swept the day
it is added. Each run is the real console script; a value a command accepts must still end it
(``watch`` looks once, ``recover`` only plans): one that starts a server or a loop and runs on
was accepted where it should have been refused (this found ``serve --cors-origin nan`` and
``serve-metrics --token-file`` without ``--events``).
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from tests.conftest import turnwatch
from tests.integrations.agent_arcs import DATA
from turnwatch.cli.app import app

VALUES = ("nan", "-1", "x")
#: What each command needs to run at all, and what keeps it from acting or running on.
NEEDS = {
    "explain": ["db57d2ab-41c6-41bd-8c68-5c7ab400d493"],
    "recover": ["db57d2ab-41c6-41bd-8c68-5c7ab400d493", "--dry-run"],
    "watch": ["--once"],
}


def cases(ledger: Path) -> list[list[str]]:
    root = typer.main.get_command(app)
    out = []
    for name, cmd in root.commands.items():  # type: ignore[attr-defined]
        base = [name, *NEEDS.get(name, [])]
        if name == "ingest":
            base.append(str(ledger.with_name("none.jsonl")))
        for p in cmd.params:
            if not type(p).__name__.endswith("Option") or getattr(p, "is_flag", False):
                continue
            opt = p.opts[0]
            if opt in ("--ledger", "--help"):
                continue
            for v in VALUES:
                out.append([*base, "--ledger", str(ledger), opt, v])
    return out


def run(argv: list[str], cwd: Path) -> tuple[list[str], int | str, str]:
    cmd = [sys.executable, "-m", "turnwatch", *argv]
    try:
        r = subprocess.run(
            cmd, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, cwd=cwd
        )
    except subprocess.TimeoutExpired:
        return argv, "ran on", ""
    return argv, r.returncode, r.stderr


# A hang is caught per case (30 s, ``run``); the whole sweep is a hundred console scripts and
# grows with every option: with both cores busy it took 136 s, past the suite's 120 s default.
@pytest.mark.timeout(900)
def test_no_option_takes_a_value_to_a_traceback_or_a_hang(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    cli = next(DATA.glob("claudecode/regressions/07-*/recordings/*/transcript.jsonl"))
    assert turnwatch("ingest", str(cli), "--ledger", str(ledger)).returncode == 0
    ledger.with_name("none.jsonl").write_text("")
    swept = cases(ledger)
    assert len(swept) > 80  # every command's options, not a few
    bad: list[tuple[object, ...]] = []
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        # In a folder of its own: a value taken as a file name (explain --svg x) is written there.
        work = tmp_path / "cwd"
        work.mkdir()
        for argv, rc, err in pool.map(lambda a: run(a, work), swept):
            said = [ln for ln in err.strip().splitlines() if ln.strip()]
            if rc not in (0, 1, 2) or "Traceback" in err:
                bad.append((argv[0], argv[-2:], rc, err[-300:]))
            elif rc == 2 and (len(said) != 1 or not said[0].startswith("error: ")):
                bad.append((argv[0], argv[-2:], "not one error line", said[:3]))
    assert bad == [], bad
