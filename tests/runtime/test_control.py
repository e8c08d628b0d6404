"""The runtime's control socket as a peer uses it: a real unix socket, one JSON line each way.

Whatever a peer sends, it gets one answer line saying what was wrong, and the connection (and
the runtime) goes on; closing the server hangs up every client.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from turnwatch import names
from turnwatch.runtime import ControlServer, LocalHost, MemorySink, Runtime
from turnwatch.runtime.control import MAX_REQUEST_BYTES

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def send(self, line: bytes) -> dict[str, Any]:
        self.writer.write(line + b"\n")
        await self.writer.drain()
        reply = await asyncio.wait_for(self.reader.readline(), 10)
        assert reply, "the server hung up without an answer"
        answer: dict[str, Any] = json.loads(reply)
        return answer

    async def ask(self, method: str, params: object, rid: int = 1) -> dict[str, Any]:
        request = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        return await self.send(json.dumps(request).encode())


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Runtime, ControlServer, MemorySink]]:
    sink = MemorySink()
    runtime = Runtime(LocalHost(subreaper=False), sink=sink)
    server = await ControlServer(runtime, tmp_path / "control.sock").start()
    yield runtime, server, sink
    await server.close()


async def connect(server: ControlServer) -> Client:
    return Client(*await asyncio.open_unix_connection(str(server.path)))


BAD_PARAMS = [
    pytest.param({"session": "s1", "turn": ["t"]}, "'turn' must be a string", id="turn-list"),
    pytest.param({"session": "s1", "turn": {"a": 1}}, "'turn' must be a string", id="turn-obj"),
    pytest.param({"session": 7}, "'session' must be a string", id="session-int"),
    pytest.param({"session": {"a": 1}}, "'session' must be a string", id="session-obj"),
    pytest.param({"session": "s1", "source": ["ui"]}, "'source' must be a string", id="source"),
    pytest.param(
        {"session": "s1", "traceparent": 5}, "'traceparent' must be a string", id="tp-int"
    ),
    pytest.param({"session": "s1", "traceparent": "garbage"}, "bad traceparent", id="tp-text"),
    pytest.param({}, "missing param 'session'", id="no-session"),
]


@pytest.mark.parametrize(("params", "said"), BAD_PARAMS)
async def test_bad_params_are_answered_and_the_connection_goes_on(
    served: tuple[Runtime, ControlServer, MemorySink], params: dict[str, Any], said: str
) -> None:
    runtime, server, sink = served
    runtime.start_turn("s1")
    client = await connect(server)

    bad = await client.ask(names.RPC_AGENT_ABORT, params)
    listed = await client.ask("sessions.list", {}, rid=2)

    assert bad["error"]["code"] == -32602, bad
    assert said in bad["error"]["message"]
    assert listed["result"][0]["processing"], "a refused abort stopped nothing"
    assert not [e for e in sink.events if e.kind == names.ABORT_RPC_RECEIVED]
    client.writer.close()


async def test_a_good_abort_with_a_trace_is_answered(
    served: tuple[Runtime, ControlServer, MemorySink],
) -> None:
    runtime, server, sink = served
    turn = runtime.start_turn("s1")
    client = await connect(server)

    answer = await client.ask(
        names.RPC_AGENT_ABORT, {"session": "s1", "turn": turn.id, "traceparent": TRACEPARENT}
    )

    assert answer["result"] == {"receipt": "accepted"}
    (received,) = [e for e in sink.events if e.kind == names.ABORT_RPC_RECEIVED]
    assert received.attrs[names.K_TRACEPARENT] == TRACEPARENT
    client.writer.close()


async def test_an_oversized_request_is_answered_then_hung_up(
    served: tuple[Runtime, ControlServer, MemorySink],
) -> None:
    _runtime, server, _sink = served
    client = await connect(server)

    answer = await client.send(b"x" * (MAX_REQUEST_BYTES + 10))

    assert answer["error"]["code"] == -32600
    assert str(MAX_REQUEST_BYTES) in answer["error"]["message"]
    assert await asyncio.wait_for(client.reader.read(), 10) == b""
    client.writer.close()


async def test_closing_the_server_hangs_up_its_clients(
    served: tuple[Runtime, ControlServer, MemorySink],
) -> None:
    """A watchdog connected when the runtime shuts down is told so at once, and the server's
    handler ends rather than being cancelled with the loop (a traceback in the log)."""
    _runtime, server, _sink = served
    client = await connect(server)
    await client.ask("sessions.list", {})
    handlers = {
        t
        for t in asyncio.all_tasks()
        if getattr(t.get_coro(), "__qualname__", "") == "ControlServer._client"
    }
    assert handlers, "the server's handler for this client"

    await server.close()

    assert await asyncio.wait_for(client.reader.read(), 10) == b""
    await asyncio.wait_for(asyncio.gather(*handlers), 10)
    assert not any(t.cancelled() for t in handlers)
    client.writer.close()
