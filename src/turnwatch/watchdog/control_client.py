"""Calling a runtime's control endpoint from another process."""

from __future__ import annotations

import itertools
import json
import socket
from typing import Any

from turnwatch import names
from turnwatch.runtime.model import TurnwatchError

_ids = itertools.count(1)


class ControlError(TurnwatchError):
    """The control endpoint could not be reached, or answered with an error."""


def call(path: str, method: str, params: dict[str, Any], *, timeout: float = 60.0) -> Any:
    """One JSON-RPC request; returns ``result`` or raises :class:`ControlError`."""
    rid = next(_ids)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(
                json.dumps(
                    {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
                ).encode()
                + b"\n"
            )
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    raise ControlError(f"{path}: the runtime closed the connection")
                buf += chunk
    except OSError as exc:
        raise ControlError(f"{path}: {exc.strerror or exc}") from None
    reply = json.loads(buf)
    if "error" in reply:
        raise ControlError(f"{path}: {reply['error']['message']}")
    return reply["result"]


def abort(path: str, session: str, *, timeout: float = 60.0) -> str:
    """``agent.abort`` with source ``watchdog``; returns the receipt."""
    result = call(
        path,
        names.RPC_AGENT_ABORT,
        {"session": session, "source": "watchdog"},
        timeout=timeout,
    )
    return str(result["receipt"])
