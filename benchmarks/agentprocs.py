"""Attributing the agent CLIs' processes: one pass with 100 followed sessions and about 1,000
processes on the machine (100 stand-in CLIs, each with a command of its own, and 800 others).

Target: ≤ 50 ms per scan.
"""

from __future__ import annotations

import hashlib
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.common import fmt_s, table
from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.runtime.procfs import ProcessTable
from turnwatch.tracing.ledger import Ledger, connect
from turnwatch.watchdog.agentprocs import Attributor

SESSIONS = 100
OTHERS = 800
PASSES = 20


def main() -> str:
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        ledger = Ledger(tmp / "l.sqlite3")
        try:
            spawned = time.time()
            for i in range(SESSIONS):
                project = tmp / f"p{i:03d}"
                project.mkdir()
                # A CLI ("claude" in its command line) with one command in its own session.
                script = "setsid sleep 120 & exec -a claude sleep 120"
                procs.append(subprocess.Popen(["bash", "-c", script], cwd=project))
            for _ in range(OTHERS):
                procs.append(subprocess.Popen(["sleep", "120"]))
            time.sleep(1.0)  # every exec done
            started = time.time()
            for i in range(SESSIONS):
                project = tmp / f"p{i:03d}"
                attrs = {
                    names.K_SOURCE: "claude-code",
                    names.K_PROJECT: hashlib.sha256(str(project).encode()).hexdigest(),
                }
                s = f"s{i:03d}"
                ledger.append(Event(names.RUNTIME_STARTED, s, started, attrs=attrs))
                ledger.append(Event(names.TURN_STARTED, s, spawned, turn=f"{s}.t1"))
            ledger.flush()
            attr = Attributor(ledger.append)
            conn = connect(ledger.path, readonly=True)
            n_procs = len(ProcessTable.scan().procs)
            t0 = time.perf_counter()
            attr.step(conn)
            first = time.perf_counter() - t0
            ledger.flush()
            times, scans = [], []
            for _ in range(PASSES):
                t0 = time.perf_counter()
                tab = ProcessTable.scan()
                t1 = time.perf_counter()
                attr.step(conn, tab)
                times.append(time.perf_counter() - t1)
                scans.append(t1 - t0)
                ledger.flush()
            attributed = conn.execute(
                "SELECT count(*) FROM sessions WHERE runtime_pid IS NOT NULL"
            ).fetchone()[0]
            recorded = conn.execute("SELECT count(*) FROM calls WHERE pid IS NOT NULL").fetchone()[
                0
            ]
            conn.close()
        finally:
            for p in procs:
                p.kill()
            for p in procs:
                p.wait()
            ledger.close()
    rows = [
        ["first pass (every CLI found: command lines and working directories read)", fmt_s(first)],
        [
            f"each pass after (median of {PASSES}), on the process table the scan reads anyway",
            fmt_s(statistics.median(times)),
        ],
        ["reading the process table (`/proc`), for comparison", fmt_s(statistics.median(scans))],
    ]
    return "\n".join(
        [
            "## Agent CLI process attribution\n",
            f"{SESSIONS} followed sessions, {n_procs} processes on the machine; "
            f"{attributed} CLIs attributed, {recorded} commands recorded. Target ≤ 50 ms per "
            "scan.\n",
            table(["pass", "time"], rows),
            "",
        ]
    )


if __name__ == "__main__":
    print(main())
