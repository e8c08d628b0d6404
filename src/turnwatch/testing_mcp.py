"""An MCP server (stdio) that answers a cancel in each of the ways real servers do.

    python -m turnwatch.testing_mcp [--log FILE] [--calls FILE]

Hand-written JSON-RPC rather than the SDK's server, because the SDK always does the polite thing
(no reply after ``notifications/cancelled``) and tests of a runtime need the impolite ones too:

- ``deploy(seconds)`` ignores the cancel, finishes, and replies with its real result, late;
- ``errors_on_cancel(seconds)`` replies ``Request cancelled`` (an error) when cancelled;
- ``never_replies()`` swallows the cancel and never answers.

Each reports progress when the caller asked for it. ``--log`` appends the request id of every
cancel received, ``--calls`` that of every ``tools/call``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

PROTOCOL = "2025-11-25"
TOOLS = [
    {
        "name": "deploy",
        "description": "Ignore a cancel: finish, then reply late.",
        "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}},
    },
    {
        "name": "errors_on_cancel",
        "description": "Reply 'Request cancelled' on a cancel.",
        "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}},
    },
    {
        "name": "never_replies",
        "description": "Swallow the cancel and never answer.",
        "inputSchema": {"type": "object", "properties": {}},
    },
]


class Server:
    def __init__(self, log: str | None, calls: str | None = None) -> None:
        self.log, self.calls_log = log, calls
        self.calls: dict[Any, asyncio.Event] = {}
        self.tasks: set[asyncio.Task[None]] = set()  # strong references while they run

    def send(self, msg: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **msg}) + "\n")
        sys.stdout.flush()

    async def progress(self, token: Any, done: float, total: float | None) -> None:
        if token is not None:
            self.send(
                {
                    "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": done, "total": total},
                }
            )

    async def call(self, rid: Any, name: str, args: dict[str, Any], token: Any) -> None:
        cancelled = self.calls.setdefault(rid, asyncio.Event())
        seconds = float(args.get("seconds", 1.0))
        steps = max(1, int(seconds / 0.1))
        for i in range(steps if name != "never_replies" else 1):
            await self.progress(token, i + 1, steps)
            if name == "errors_on_cancel" and cancelled.is_set():
                self.send({"id": rid, "error": {"code": -32800, "message": "Request cancelled"}})
                return
            await asyncio.sleep(seconds / steps)
        if name == "never_replies":
            await asyncio.Event().wait()
        text = f"{name} finished after {seconds:g}s" + (
            " (cancel ignored)" if cancelled.is_set() else ""
        )
        self.send(
            {"id": rid, "result": {"content": [{"type": "text", "text": text}], "isError": False}}
        )

    def handle(self, msg: dict[str, Any]) -> None:
        method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if method == "initialize":
            self.send(
                {
                    "id": rid,
                    "result": {
                        "protocolVersion": params.get("protocolVersion", PROTOCOL),
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "turnwatch-testing-mcp", "version": "1"},
                    },
                }
            )
        elif method == "tools/list":
            self.send({"id": rid, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            _append(self.calls_log, rid)
            token = (params.get("_meta") or {}).get("progressToken")
            task = asyncio.ensure_future(
                self.call(rid, params["name"], params.get("arguments") or {}, token)
            )
            self.tasks.add(task)  # a strong reference while it runs
            task.add_done_callback(self.tasks.discard)
        elif method == "notifications/cancelled":
            target = params.get("requestId")
            self.calls.setdefault(target, asyncio.Event()).set()
            _append(self.log, target)
        elif rid is not None and method is not None:
            self.send({"id": rid, "result": {}})  # ping and friends


def _append(path: str | None, rid: Any) -> None:
    if path:
        with open(path, "a") as fh:
            fh.write(f"{rid}\n")


async def main(log: str | None, calls: str | None) -> None:
    server = Server(log, calls)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=16 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        server.handle(json.loads(line))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", help="append the id of every cancel received to this file")
    parser.add_argument("--calls", help="append the id of every tools/call to this file")
    args = parser.parse_args()
    asyncio.run(main(args.log, args.calls))
