"""A real runtime in its own process, for cross-process watchdog tests.

python -m tests.watchdog.runtime_proc LEDGER SOCKET MODE TOOL ARGS_JSON STOP [CONTAINMENT [GRACE]]
"""

from __future__ import annotations

import asyncio
import json
import sys

from turnwatch.runtime import LocalHost, Runtime
from turnwatch.runtime.control import ControlServer
from turnwatch.tracing.ledger import Ledger


async def main(
    ledger_path: str,
    sock: str,
    mode: str,
    tool: str,
    args: str,
    stop: str,
    containment: str = "auto",
    grace: str = "0.5",
) -> None:
    ledger = Ledger(ledger_path)
    rt = Runtime(LocalHost(containment=containment), mode=mode, grace_s=float(grace), sink=ledger)
    async with ControlServer(rt, sock):
        turn = rt.start_turn("far")
        turn.request(tool, json.loads(args))
        await asyncio.sleep(0.2)
        clicks = []  # the user's stop: in legacy mode it pins until the watchdog walks
        if stop == "stop":
            clicks.append(asyncio.ensure_future(rt.abort("far")))
        await asyncio.sleep(0.1)
        ledger.flush()
        print("ready", flush=True)
        while True:
            await asyncio.sleep(0.05)
            ledger.flush()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:9]))
