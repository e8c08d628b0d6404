"""The console script starts with the garbage collector paused, and runs its command with it on.

Starting a command makes objects that live as long as the process; the collector walked them
~70 times before ``turnwatch sessions`` read its ledger (20-30 ms of a start, #31). Timing is
``make bench``'s; here, what the collector does, read from its own callbacks in a fresh process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import streams

#: Runs ``python -m turnwatch ARGV`` in this process (the console script's path), counting the
#: collections from the app's first import until the command began (nothing frozen yet: the
#: command's start freezes what start-up made; what runs before the app's import is a few
#: hundred objects, where one young collection may fall or not), and the collector's state in
#: the command (``read_conn``: the command reading its ledger) and after it.
PROBE = """
import gc, json, runpy, sys
out, pre, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
seen = {"before": 0, "in_command": None}
if pre:  # the command's helpers imported first, to look inside the command
    from turnwatch.cli import common
    read_conn = common.read_conn
    def probe(*args, **kwargs):
        seen["in_command"] = gc.isenabled()
        return read_conn(*args, **kwargs)
    common.read_conn = probe
def counted(phase, info):
    # From the app's first import (the typer stack: ~all of start-up) to the command's start.
    if phase == "start" and "turnwatch.cli.app" in sys.modules and gc.get_freeze_count() == 0:
        seen["before"] += 1
gc.callbacks.append(counted)
sys.argv = ["turnwatch", *argv]
try:
    runpy.run_module("turnwatch", run_name="__main__")
except SystemExit as done:
    seen["code"] = done.code
seen["after"] = gc.isenabled()
with open(out, "w") as f:
    json.dump(seen, f)
"""


def probe(tmp_path: Path, *argv: str, pre: bool = False, off: bool = False) -> dict[str, object]:
    out = tmp_path / "seen.json"
    script = ("import gc; gc.disable()\n" if off else "") + PROBE
    subprocess.run(
        [sys.executable, "-c", script, str(out), "1" if pre else "", *argv],
        capture_output=True,
        timeout=60,
        check=True,
    )
    seen: dict[str, object] = json.loads(out.read_text())
    return seen


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return streams.ledger(tmp_path / "ledger.sqlite3")


@pytest.mark.parametrize(
    "argv",
    [["sessions"], ["explain", "pinned"], ["watch", "--once", "--no-recover"]],
    ids=" ".join,
)
def test_start_up_runs_no_collection(tmp_path: Path, ledger: Path, argv: list[str]) -> None:
    """From the app's first import to the command's first line, the collector never runs; after
    the command it is on again. Fails on the code before: 74 to 86 collections."""
    seen = probe(tmp_path, *argv, "--ledger", str(ledger))
    assert seen["code"] in (0, 1)  # it ran (watch --once: 1, findings remain)
    assert seen["before"] == 0
    assert seen["after"] is True


def test_the_command_itself_runs_with_the_collector_on(tmp_path: Path, ledger: Path) -> None:
    """A command may run for months (``watch``, ``serve``): it collects as any program does."""
    seen = probe(tmp_path, "sessions", "--ledger", str(ledger), pre=True)
    assert seen["in_command"] is True
    assert seen["after"] is True


def test_a_usage_error_leaves_the_collector_on(tmp_path: Path) -> None:
    seen = probe(tmp_path, "sessions", "--no-such-option")
    assert seen["code"] == 2
    assert seen["after"] is True


def test_a_host_that_turned_the_collector_off_keeps_it_off(tmp_path: Path, ledger: Path) -> None:
    """``main`` resumes only what it paused."""
    seen = probe(tmp_path, "sessions", "--ledger", str(ledger), pre=True, off=True)
    assert seen["in_command"] is False
    assert seen["after"] is False


def test_app_main_in_another_program_never_touches_its_collector(ledger: Path) -> None:
    """Only the console script pauses it: ``app.main`` in a test or an embedding runs with the
    collector as its host has it, and freezes nothing of the host's."""
    code = (
        "import gc, sys\n"
        f"sys.argv = ['turnwatch', 'sessions', '--ledger', {str(ledger)!r}]\n"
        "from turnwatch.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(gc.isenabled(), gc.get_freeze_count())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split()[-2:] == ["True", "0"]
