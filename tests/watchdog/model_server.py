"""A scripted model server on 127.0.0.1 for the agent CLIs: Anthropic's Messages API (Claude
Code, through ``ANTHROPIC_BASE_URL``), streaming or not, and OpenAI's Responses API, streaming
(Codex, through a model provider's ``base_url``). Every request with tools is answered with the
next scripted step (a shell command to run, then a text reply); anything else with a short text.
It records what it was asked, for the test to read."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Script:
    """What the model says, turn by turn: run ``command`` with the CLI's shell tool, then text."""

    def __init__(self, command: str, tool: str = "Bash") -> None:
        self.command = command
        self.tool = tool
        self.asked: list[dict[str, Any]] = []
        self._n = 0
        self._lock = threading.Lock()

    def next(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.asked.append(body)
            if not body.get("tools"):
                return {"type": "text", "text": "ok"}
            self._n += 1
            if self._n == 1:
                return {
                    "type": "tool_use",
                    "id": "toolu_scripted_1",
                    "name": self.tool,
                    "input": {"command": self.command, "description": "scripted"},
                }
            return {"type": "text", "text": "done"}


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _stream(block: dict[str, Any], model: str) -> Iterator[bytes]:
    stop = "tool_use" if block["type"] == "tool_use" else "end_turn"
    msg: dict[str, Any] = {
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 0},
    }
    yield _sse("message_start", {"type": "message_start", "message": msg})
    if block["type"] == "tool_use":
        start = {**block, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    else:
        start = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": block["text"]}
    yield _sse(
        "content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}
    )
    yield _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
    yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 1},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


def _shell_call(block: dict[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The Responses API ``function_call`` for the shell tool the CLI offered, in its shape."""
    command = block["input"]["command"]
    offered = {t.get("name") for t in tools}
    if "exec_command" in offered:
        name, args = "exec_command", {"cmd": command}
    elif "shell_command" in offered:
        name, args = "shell_command", {"command": command}
    else:
        name, args = "shell", {"command": ["bash", "-lc", command]}
    return {
        "type": "function_call",
        "id": "fc_scripted_1",
        "call_id": block["id"],
        "name": name,
        "arguments": json.dumps(args),
    }


def _responses(block: dict[str, Any], body: dict[str, Any]) -> Iterator[bytes]:
    """One Responses API stream: created, the output item, completed."""
    if block["type"] == "tool_use":
        item = _shell_call(block, body.get("tools") or [])
    else:
        item = {
            "type": "message",
            "role": "assistant",
            "id": "msg_scripted",
            "content": [{"type": "output_text", "text": block["text"]}],
        }
    usage = {
        "input_tokens": 1,
        "input_tokens_details": None,
        "output_tokens": 1,
        "output_tokens_details": None,
        "total_tokens": 2,
    }
    for ev in (
        {"type": "response.created", "response": {"id": "resp_scripted"}},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": {"id": "resp_scripted", "usage": usage}},
    ):
        yield _sse(str(ev["type"]), ev)


@contextmanager
def serve(script: Script) -> Iterator[str]:
    """The server's base URL while the block runs."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: object) -> None:
            return

        def do_POST(self) -> None:
            size = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(size) or b"{}")
            if self.path.split("?")[0].endswith("/responses"):
                self._send(b"".join(_responses(script.next(body), body)), "text/event-stream")
                return
            if not self.path.split("?")[0].endswith("/v1/messages"):
                self._json({"input_tokens": 1} if "count_tokens" in self.path else {})
                return
            block = script.next(body)
            model = str(body.get("model") or "claude-scripted")
            if body.get("stream"):
                self._send(b"".join(_stream(block, model)), "text/event-stream")
                return
            stop = "tool_use" if block["type"] == "tool_use" else "end_turn"
            self._json(
                {
                    "id": "msg_scripted",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [block],
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                }
            )

        def do_GET(self) -> None:
            self._json({})

        def _json(self, obj: object) -> None:
            self._send(json.dumps(obj).encode(), "application/json")

        def _send(self, data: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
