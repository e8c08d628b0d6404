"""Calling a runtime's control endpoint from another process.

The path comes from the ledger, and whatever listens there now answers: the runtime that
recorded it, a newer or hung one, or another program that took the path since. Anything but a
JSON-RPC answer is a :class:`ControlError` that says so, never another exception: one session's
bad endpoint must not end a watchdog that recovers the others.
"""

from __future__ import annotations

import itertools
import json
import socket
from typing import Any

from turnwatch import names
from turnwatch.runtime.model import TurnwatchError

_ids = itertools.count(1)
#: The longest reply read (``sessions.list`` of a busy runtime is well under a megabyte): a
#: peer that streams without ever ending its line is cut off here, not read into memory.
MAX_REPLY_BYTES = 16 * 1024 * 1024


class ControlError(TurnwatchError):
    """The control endpoint could not be reached, or answered with an error."""


def call(path: str, method: str, params: dict[str, Any], *, timeout: float = 60.0) -> Any:
    """One JSON-RPC request; returns ``result`` or raises :class:`ControlError`."""
    rid = next(_ids)
    chunks: list[bytes] = []
    size = 0
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
            while not chunks or not chunks[-1].endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    raise ControlError(f"{path}: the runtime closed the connection")
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_REPLY_BYTES:
                    raise ControlError(
                        f"{path}: not a JSON-RPC reply (no line within {MAX_REPLY_BYTES:,} bytes)"
                    )
    except OSError as exc:
        raise ControlError(f"{path}: {exc.strerror or exc}") from None
    return _result(path, b"".join(chunks))


def _result(path: str, line: bytes) -> Any:
    """The ``result`` of one reply line, or the :class:`ControlError` it amounts to."""
    try:
        reply = json.loads(line)
    except ValueError:  # not JSON, or not UTF-8
        raise ControlError(f"{path}: not a JSON-RPC reply: {_shown(line)}") from None
    if isinstance(reply, dict) and "result" in reply:
        return reply["result"]
    error = reply.get("error") if isinstance(reply, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        raise ControlError(f"{path}: {error['message']}")
    raise ControlError(f"{path}: not a JSON-RPC reply: {_shown(line)}")


def _shown(line: bytes, limit: int = 80) -> str:
    """The start of what a peer said, as one line."""
    text = line.decode("utf-8", "backslashreplace").strip()
    return repr(text[:limit] + ("…" if len(text) > limit else ""))


def abort(
    path: str,
    session: str,
    *,
    source: str = "watchdog",
    traceparent: str | None = None,
    timeout: float = 60.0,
) -> str:
    """``agent.abort`` (by default with source ``watchdog``); returns the receipt."""
    params = {"session": session, "source": source}
    if traceparent:
        params["traceparent"] = traceparent
    result = call(path, names.RPC_AGENT_ABORT, params, timeout=timeout)
    receipt = result.get("receipt") if isinstance(result, dict) else None
    if not isinstance(receipt, str):
        raise ControlError(f"{path}: not a JSON-RPC reply: agent.abort without a receipt")
    return receipt
