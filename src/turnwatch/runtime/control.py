"""The runtime's control endpoint: JSON-RPC 2.0, one request per line, over a unix socket.

The socket is created with mode 0600 and every peer's uid is checked (``SO_PEERCRED``), so only
the runtime's own user can stop its sessions. Methods: ``agent.abort`` (the same abort the UI
calls, so the watchdog recovers a pinned session with the same walk) and ``sessions.list``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import struct
from pathlib import Path
from typing import Any

from turnwatch import names
from turnwatch.runtime.model import StopSource, TurnwatchError, parse_traceparent
from turnwatch.runtime.runtime import Runtime

MAX_REQUEST_BYTES = 64 * 1024
_PARSE_ERROR, _INVALID, _NO_METHOD, _INVALID_PARAMS, _SERVER_ERROR = (
    -32700,
    -32600,
    -32601,
    -32602,
    -32000,
)


def _peer_uid(sock: socket.socket) -> int | None:
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return None
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


class ControlServer:
    """Serves one runtime's control socket; sets ``runtime.control`` to its path."""

    def __init__(self, runtime: Runtime, path: Path | str) -> None:
        self.runtime = runtime
        self.path = Path(path)
        self._server: asyncio.base_events.Server | None = None
        self.refused_peers = 0
        # Connected clients: closing the server hangs them up (Python 3.11's Server.close()
        # leaves them open, and their handlers are then cancelled at the loop's end with a
        # traceback in the log).
        self._clients: set[asyncio.StreamWriter] = set()

    async def start(self) -> ControlServer:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        old = os.umask(0o177)  # the socket is born 0600: no window where others may connect
        try:
            self._server = await asyncio.start_unix_server(
                self._client, path=str(self.path), limit=MAX_REQUEST_BYTES
            )
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self.runtime.control = str(self.path)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._clients):
                writer.close()
            await self._server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        if self.runtime.control == str(self.path):
            self.runtime.control = None

    async def __aenter__(self) -> ControlServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        self._clients.add(writer)
        try:
            if sock is None or _peer_uid(sock) != os.getuid():
                self.refused_peers += 1
                return
            while True:
                try:
                    line = await reader.readline()
                except ValueError:  # over the limit: said, then the connection is closed
                    reply = _error(None, _INVALID, f"request over {MAX_REQUEST_BYTES} bytes")
                    writer.write(json.dumps(reply).encode() + b"\n")
                    await writer.drain()
                    return
                if not line:
                    return
                reply = await self._dispatch(line)
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        except ConnectionError:
            pass  # a peer that hung up: nothing to answer
        finally:
            self._clients.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _dispatch(self, line: bytes) -> dict[str, Any]:
        try:
            req = json.loads(line)
        except json.JSONDecodeError as exc:
            return _error(None, _PARSE_ERROR, f"parse error: {exc}")
        if not isinstance(req, dict) or req.get("jsonrpc") != "2.0" or "method" not in req:
            return _error(
                req.get("id") if isinstance(req, dict) else None, _INVALID, "invalid request"
            )
        rid, method, params = req.get("id"), req["method"], req.get("params") or {}
        if not isinstance(params, dict):
            return _error(rid, _INVALID_PARAMS, "params must be an object")
        try:
            if method == names.RPC_AGENT_ABORT:
                session = _text(params, "session")
                if session is None:
                    raise KeyError("session")
                traceparent = _text(params, "traceparent")
                receipt = await self.runtime.abort(
                    session,
                    source=_text(params, "source") or StopSource.API,
                    turn=_text(params, "turn"),
                    traceparent=traceparent and parse_traceparent(traceparent),
                )
                return {"jsonrpc": "2.0", "id": rid, "result": {"receipt": receipt.value}}
            if method == "sessions.list":
                return {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": [
                        {
                            "session": s.id,
                            "processing": s.processing,
                            "turn": s.live.id if s.live else None,
                            "stopping": bool(s.live and s.live.stopping),
                        }
                        for s in self.runtime.sessions.values()
                    ],
                }
        except KeyError as exc:
            return _error(rid, _INVALID_PARAMS, f"missing param {exc}")
        except (TurnwatchError, ValueError) as exc:
            return _error(rid, _INVALID_PARAMS, str(exc))
        return _error(
            rid, _NO_METHOD, f"unknown method {method!r}; methods: agent.abort, sessions.list"
        )


def _text(params: dict[str, Any], key: str) -> str | None:
    """A string param, or None if absent; any other type is a ValueError naming it."""
    value = params.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"param {key!r} must be a string, not {type(value).__name__}")


def _error(rid: object, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}
