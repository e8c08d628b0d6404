"""A runtime for the chaos test, in its own process: one turn of SESSION with a process call (a
TERM-ignoring tree that logs each SIGTERM it gets, by pid), a read-only call hung on FIFO and a
mutating Write, then the user's stop after STOP_AFTER seconds. It flushes its ledger every 20 ms
until it is killed (the chaos test SIGKILLs it at a random moment). Given LINES, it writes its
events there as JSON lines instead (``EventLines``), for a ``turnwatch ingest --follow`` of its
own to write the ledger: the writer the chaos test kills on its own.

python -m tests.watchdog.chaos_runtime LEDGER SESSION FIFO WORKDIR STOP_AFTER [LINES]
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from turnwatch.runtime import LocalHost, Runtime
from turnwatch.tracing.eventlines import EventLines
from turnwatch.tracing.ledger import Ledger

GRACE_S = 0.5


def tree(log: Path) -> str:
    """Bash ignoring SIGTERM, with a subshell that ignores it too: each logs ``TERM <pid>``."""
    trap = f"trap 'echo TERM $BASHPID >> {log}' TERM"
    return f"{trap}; ({trap}; while :; do sleep 0.1; done) & while :; do sleep 0.1; done"


async def main(
    ledger_path: str, session: str, fifo: str, workdir: str, stop_after: str, lines: str = ""
) -> None:
    ledger = EventLines(lines) if lines else Ledger(ledger_path)
    work = Path(workdir)
    rt = Runtime(LocalHost(), grace_s=GRACE_S, sink=ledger)
    turn = rt.start_turn(session, f"{session}.t1")
    turn.request("Bash", {"command": tree(work / f"{session}.terms")})
    turn.request("Read", {"path": fifo})
    turn.request("Write", {"path": str(work / f"{session}.out"), "content": "x" * 4_000_000})
    await asyncio.sleep(0.1)
    ledger.flush()
    print("ready", flush=True)
    await asyncio.sleep(float(stop_after))
    stop = asyncio.ensure_future(rt.abort(session))
    said = False
    while True:
        await asyncio.sleep(0.02)
        if isinstance(ledger, Ledger):
            ledger.flush(timeout=1)
        else:
            ledger.flush()
        if stop.done() and not said:
            print("settled", flush=True)
            said = True


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
