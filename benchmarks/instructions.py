"""Instructions per no-op tool call, bare and instrumented, counted by callgrind.

Wall-clock figures on a shared 2-core machine move by several microseconds from run to run;
instruction counts do not. Each variant runs twice under ``valgrind --tool=callgrind`` (both
threads counted), with N and 2N calls: the difference is the cost of N calls, without start-up
and imports. Skipped, with a note, where valgrind is not installed.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks import tracing
from benchmarks.common import table

CALLS = 2000
VARIANTS = {
    "no sink": "bare",
    "ledger + metrics, no spans": "ledger",
    "ledger + spans + metrics": "full",
}


async def _child(variant: str, calls: int) -> None:
    tracing.CALLS = calls
    with tempfile.TemporaryDirectory() as tmp:
        if variant == "bare":
            await tracing.per_call(None)
            return
        tel = tracing.telemetry(Path(tmp) / "ledger.sqlite3", spans=variant == "full")
        await tracing.per_call(tel)
        assert tel.ledger is not None
        tel.ledger.close()


def _count(variant: str, calls: int) -> int:
    out = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-m",
            "benchmarks.instructions",
            variant,
            str(calls),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no total:\n{out.stderr[-2000:]}")
    return int(found.group(1))


def main() -> str:
    head = "### Instructions per no-op tool call (callgrind)\n\n"
    if shutil.which("valgrind") is None:
        return head + "_Skipped: valgrind is not installed (`apt-get install valgrind`)._\n"
    jobs = [(v, n) for v in VARIANTS.values() for n in (CALLS, 2 * CALLS)]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: _count(*job), jobs), strict=True))
    per = {v: (counts[(v, 2 * CALLS)] - counts[(v, CALLS)]) / CALLS for v in VARIANTS.values()}
    rows = [
        [label, f"{per[v]:,.0f}", "" if v == "bare" else f"+{per[v] - per['bare']:,.0f}"]
        for label, v in VARIANTS.items()
    ]
    note = (
        f"\n\n{CALLS:,} calls against {2 * CALLS:,}, both threads counted. Instrumented, a call "
        f"costs {per['full'] / per['bare']:.2f}× the instructions of a bare one.\n"
    )
    return head + table(["sink", "instructions per call", "added"], rows) + note


if __name__ == "__main__":
    if len(sys.argv) == 3:
        asyncio.run(_child(sys.argv[1], int(sys.argv[2])))
    else:
        print(main())
