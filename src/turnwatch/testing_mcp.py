"""An MCP server (stdio) that answers a cancel in each of the ways real servers do.

    python -m turnwatch.testing_mcp [--log FILE] [--calls FILE] [--modern]

Hand-written JSON-RPC rather than the SDK's server, because the SDK always does the polite thing
(no reply after ``notifications/cancelled``) and tests of a runtime need the impolite ones too:

- ``deploy(seconds)`` ignores the cancel, finishes, and replies with its real result, late;
- ``errors_on_cancel(seconds)`` replies ``Request cancelled`` (an error) when cancelled;
- ``never_replies()`` swallows the cancel and never answers;
- ``asks_for_input()`` asks its caller where to deploy in the middle of the call (MCP's
  ``input_required`` result), then replies with what it was told. That needs ``--modern``:
  the server then answers ``server/discover`` (protocol 2026-07-28, where each request carries
  its client's version and capabilities in ``_meta``), and asks only a client whose request
  says it can answer (``elicitation``), as the SDK's own servers read a request.

The first three report progress when the caller asked for it. ``--log`` appends the request
id of every cancel received, ``--calls`` that of every ``tools/call``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

PROTOCOL = "2025-11-25"
MODERN = "2026-07-28"
#: Where a 2026-07-28 request carries what its client is (the SDK's ``*_META_KEY``).
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
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
    {
        "name": "asks_for_input",
        "description": "Ask where to deploy (input_required), then say where it deployed.",
        "inputSchema": {"type": "object", "properties": {}},
    },
]
#: The question ``asks_for_input`` sends (one elicitation, keyed ``where``), and the opaque state
#: its caller must echo with the answer.
ASK_STATE = "asked-where"
ASK = {
    "resultType": "input_required",
    "inputRequests": {
        "where": {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": "Deploy where?",
                "requestedSchema": {
                    "type": "object",
                    "properties": {"env": {"type": "string"}},
                    "required": ["env"],
                },
            },
        }
    },
    "requestState": ASK_STATE,
}


class Server:
    def __init__(self, log: str | None, calls: str | None = None, modern: bool = False) -> None:
        self.log, self.calls_log, self.modern = log, calls, modern
        self.calls: dict[Any, asyncio.Event] = {}
        self.tasks: set[asyncio.Task[None]] = set()  # strong references while they run

    def send(self, msg: dict[str, Any]) -> None:
        result = msg.get("result")
        if self.modern and isinstance(result, dict) and "resultType" not in result:
            msg = {**msg, "result": {"resultType": "complete", **result}}  # 2026-07-28 asks it
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **msg}) + "\n")
        sys.stdout.flush()

    def answer(self, rid: Any, text: str) -> None:
        """A call's result: ``text``, not an error."""
        self.send(
            {"id": rid, "result": {"content": [{"type": "text", "text": text}], "isError": False}}
        )

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
        self.answer(rid, text)

    def ask(self, rid: Any, params: dict[str, Any]) -> None:
        """``asks_for_input``: its question first; then, given the answer and the state it sent,
        its result (a wrong state is an error, as a server that lost track of it would say)."""
        meta = params.get("_meta") or {}
        if not self.modern or meta.get(META_VERSION) != MODERN:
            self.send({"id": rid, "error": {"code": -32601, "message": f"needs protocol {MODERN}"}})
            return
        if "elicitation" not in (meta.get(META_CAPABILITIES) or {}):
            text = "cannot ask: the request does not say its client can answer (elicitation)"
            self.send({"id": rid, "error": {"code": -32602, "message": text}})
            return
        responses = params.get("inputResponses")
        if not responses:
            self.send({"id": rid, "result": ASK})
            return
        if params.get("requestState") != ASK_STATE:
            self.send({"id": rid, "error": {"code": -32602, "message": "unknown requestState"}})
            return
        answer = responses.get("where") or {}
        if answer.get("action") == "accept":
            text = f"deployed to {(answer.get('content') or {}).get('env')}"
        else:
            text = f"not deployed: {answer.get('action')}"
        self.answer(rid, text)

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
        elif method == "server/discover" and self.modern:
            self.send(
                {
                    "id": rid,
                    "result": {  # resultType: send() adds it
                        "ttlMs": 0,
                        "cacheScope": "private",
                        "supportedVersions": [MODERN],
                        "capabilities": {"tools": {}},
                    },
                }
            )
        elif method == "server/discover":
            self.send({"id": rid, "error": {"code": -32601, "message": "Method not found"}})
        elif method == "tools/list":
            cache = {"ttlMs": 0, "cacheScope": "private"} if self.modern else {}
            self.send({"id": rid, "result": {"tools": TOOLS, **cache}})
        elif method == "tools/call":
            _append(self.calls_log, rid)
            if params.get("name") == "asks_for_input":
                self.ask(rid, params)
                return
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


def logged(path: str | os.PathLike[str]) -> list[str]:
    """The request ids a server wrote to ``path`` (its ``--log`` or ``--calls``), in order;
    none if it wrote nothing yet."""
    try:
        with open(path) as fh:
            return fh.read().split()
    except FileNotFoundError:
        return []


def _append(path: str | None, rid: Any) -> None:
    if path:
        with open(path, "a") as fh:
            fh.write(f"{rid}\n")


async def main(log: str | None, calls: str | None, modern: bool = False) -> None:
    server = Server(log, calls, modern)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=16 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        server.handle(json.loads(line))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", help="append the id of every cancel received to this file")
    parser.add_argument("--calls", help="append the id of every tools/call to this file")
    parser.add_argument(
        "--modern", action="store_true", help=f"speak protocol {MODERN} (server/discover)"
    )
    args = parser.parse_args()
    asyncio.run(main(args.log, args.calls, args.modern))
