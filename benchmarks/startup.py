"""Start-up of the triage commands, side by side with what they cannot go below.

Each command runs as a fresh process against the same small ledger, interleaved with a bare
``python -c pass`` and with a typer app of two commands and three options that prints a rich
table (typer and rich import, then typer's parameter coercion, then rich renders): the stack the
commands are built on. On a shared machine only the ratios measured in one run mean anything.

Bytecode is written and a first round discarded, as an installed package runs (pip compiles it):
with ``PYTHONDONTWRITEBYTECODE`` set, as it is on these machines, every start would compile
turnwatch's modules again (~50 ms) and the figures would be about this checkout, not a user's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests import streams

from benchmarks.common import median, table

RUNS = 11
FLOOR = "typer app printing a rich table (the floor)"
PAUSED = "the same with the garbage collector off, as turnwatch's commands start"

TYPER_FLOOR = """
from typing import Annotated
import typer
from rich.console import Console
from rich.table import Table
app = typer.Typer()
@app.command()
def a(x: Annotated[str, typer.Argument()] = "", y: float = 1.0, z: bool = False) -> None:
    t = Table("session", "state")
    t.add_row(x, "pinned")
    Console().print(t)
@app.command()
def b(x: str = "") -> None:
    print(x)
app()
"""


def main() -> str:
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        ledger = str(streams.ledger(tmp / "ledger.sqlite3"))
        # This interpreter's own console script (as a user runs it), not the first turnwatch
        # on PATH, which may be another install: else ``python -m turnwatch``, the same entry.
        script = Path(sys.executable).with_name("turnwatch")
        tw = [str(script)] if script.exists() else [sys.executable, "-m", "turnwatch"]
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            FLOOR: [sys.executable, "-c", TYPER_FLOOR, "a", "hi"],
            # turnwatch's console script pauses the collector until its command begins
            # (turnwatch.cli.entry): the floor with the same, so that what turnwatch itself
            # costs stays in sight beside the figure, over the floor as it was.
            PAUSED: [sys.executable, "-c", "import gc; gc.disable()\n" + TYPER_FLOOR, "a", "hi"],
            "turnwatch sessions": [*tw, "sessions", "--ledger", ledger],
            "turnwatch explain pinned": [*tw, "explain", "pinned", "--ledger", ledger],
            "turnwatch recover pinned --dry-run": [
                *tw,
                "recover",
                "pinned",
                "--dry-run",
                "--ledger",
                ledger,
            ],
            "turnwatch watch --once --no-recover": [
                *tw,
                "watch",
                "--once",
                "--no-recover",
                "--ledger",
                ledger,
            ],
        }
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        times: dict[str, list[float]] = {k: [] for k in commands}
        for i in range(RUNS + 1):
            for name, cmd in commands.items():
                t0 = time.perf_counter()
                subprocess.run(cmd, capture_output=True, timeout=60, env=env)
                if i:  # the first round writes the bytecode
                    times[name].append(time.perf_counter() - t0)
    bare = median(times["python -c pass"])
    floor, paused = median(times[FLOOR]), median(times[PAUSED])
    rows = [
        [
            f"`{name}`",
            f"{median(v) * 1e3:.0f} ms",
            f"{median(v) / bare:.1f}×",
            *(
                [f"{(median(v) - floor) * 1e3:+.0f} ms", f"{(median(v) - paused) * 1e3:+.0f} ms"]
                if name.startswith("turnwatch")
                else ["", ""]
            ),
        ]
        for name, v in times.items()
    ]
    head = ["command", "wall", "× python -c pass", "over the typer floor", "over the paused floor"]
    return (
        f"### Start-up of the triage commands (median of {RUNS}, interleaved)\n\n"
        + table(head, rows)
        + "\n(targets, #31: `sessions` and `explain` within +25 ms of the typer floor, "
        "`watch --once` and `recover --dry-run` within +60 ms; the paused floor's column is "
        "what turnwatch's own imports and work add)\n"
    )


if __name__ == "__main__":
    print(main())
