"""The HTTP server behind ``/metrics``, the events API and the live page, left up for months: a
client that connects and then sends nothing (a dead laptop's half-open connection, a scanner, a
proxy's idle pool) held a thread for the server's life; one that stopped halfway through a body
ended in a traceback. Each is now let go after ``CLIENT_TIMEOUT_S``, quietly."""

from __future__ import annotations

import io
import json
import socket
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import exchange, wait_until
from turnwatch.exporters import http
from turnwatch.runtime.events import Event
from turnwatch.tracing.eventsapi import PATH, EventsApp

TIMEOUT_S = 0.3


def hello(environ: dict[str, Any], start: Any) -> list[bytes]:
    start("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


@pytest.fixture(params=["metrics alone", "with routes"])
def port(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setattr(http, "CLIENT_TIMEOUT_S", TIMEOUT_S)
    routes = {"/hello": hello} if request.param == "with routes" else None
    server, bound = http.serve(CollectorRegistry(), "127.0.0.1:0", routes=routes)
    yield bound
    http.stop(server)


def closed_by_server(conn: socket.socket) -> bool:
    """True once the server hangs up (EOF, or whatever it said and then EOF)."""
    conn.settimeout(5 + 10 * TIMEOUT_S)  # far past the server's timeout
    try:
        while conn.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def test_a_client_that_sends_nothing_is_let_go(
    port: int, capfd: pytest.CaptureFixture[str]
) -> None:
    before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    for conn in idle[::2]:
        conn.sendall(b"GET /metrics HTTP/1.1\r\n")  # half a request, then nothing
    # Meanwhile, a scrape is answered.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.status == 200
    assert all(closed_by_server(conn) for conn in idle)
    for conn in idle:
        conn.close()
    # Each client's thread ended with it.
    wait_until(lambda: threading.active_count() <= before, what="the clients' threads to end")
    assert "Traceback" not in capfd.readouterr().err


def test_a_body_that_stops_halfway_is_a_408_and_records_nothing(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(http, "CLIENT_TIMEOUT_S", TIMEOUT_S)
    recorded: list[list[Event]] = []
    server, port = http.serve(
        CollectorRegistry(), "127.0.0.1:0", routes={PATH: EventsApp(recorded.append)}
    )
    try:
        reply = exchange(
            port,
            f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n"
            "Content-Length: 1000\r\n\r\n".encode()
            + b'{"kind": "turn.started"',  # and then nothing
            timeout=5,
        )
    finally:
        http.stop(server)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].split(b" ", 1)[1] == b"408 Request Timeout"
    assert "body" in json.loads(body)["error"]
    assert recorded == []
    assert "Traceback" not in capfd.readouterr().err


def test_a_client_that_stops_reading_its_answer_is_let_go_quietly(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(http, "CLIENT_TIMEOUT_S", TIMEOUT_S)

    def big(environ: dict[str, Any], start: Any) -> list[bytes]:
        start("200 OK", [("Content-Type", "text/plain")])
        return [b"x" * 50_000_000]  # far more than the socket buffers hold

    before = threading.active_count()
    server, port = http.serve(CollectorRegistry(), "127.0.0.1:0", routes={"/big": big})
    try:
        conn = socket.create_connection(("127.0.0.1", port))
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        conn.sendall(b"GET /big HTTP/1.0\r\n\r\n")  # and never reads
        wait_until(  # the server's own thread alone
            lambda: threading.active_count() <= before + 1, what="the reader's thread to end"
        )
        conn.close()
    finally:
        http.stop(server)
    assert "Traceback" not in capfd.readouterr().err


def test_a_chunked_body_reads_as_its_data_however_it_is_asked_for() -> None:
    """wsgi.input of a chunked request: its chunks' data, by read(), read(n) or line by line."""
    body = b"4\r\nab\nc\r\n3;ext=1\r\nd\nx\r\n0\r\nTrailer: t\r\n\r\n"
    assert http.Dechunked(io.BytesIO(body)).read() == b"ab\ncd\nx"
    reader = http.Dechunked(io.BytesIO(body))
    assert [reader.read(3), reader.read(3), reader.read(3), reader.read(3)] == [
        b"ab\n",
        b"cd\n",
        b"x",
        b"",
    ]
    assert list(http.Dechunked(io.BytesIO(body))) == [b"ab\n", b"cd\n", b"x"]
    with pytest.raises(ValueError, match="chunk size"):
        http.Dechunked(io.BytesIO(b"-5\r\nabcde\r\n0\r\n\r\n")).read()


#: A body the server will not read, sent after its answer: 6 MiB, more than the sockets'
#: buffers take (so a closed server's reset reaches the sender), less than http.LINGER_BYTES.
REST = [b"x" * 65536] * 96


def post(head: str, auth: str = "t") -> bytes:
    return f"POST {PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {auth}\r\n{head}\r\n".encode()


@pytest.mark.parametrize(
    ("first", "rest", "status"),
    [
        pytest.param(
            post("Content-Length: 7000000\r\n"), REST, b"413 Content Too Large", id="sized, over"
        ),
        pytest.param(
            # one chunk over the 1,024-byte limit, then more chunks
            post("Transfer-Encoding: chunked\r\n") + b"800\r\n" + b"x" * 2048 + b"\r\n",
            [b"10000\r\n" + part + b"\r\n" for part in REST] + [b"0\r\n\r\n"],
            b"413 Content Too Large",
            id="chunked, over",
        ),
        pytest.param(
            post("Content-Length: 6291456\r\n", auth="wrong"),
            REST,
            b"401 Unauthorized",
            id="no token",
        ),
        pytest.param(
            # the server reads 64 KiB of it, and refuses it before any app sees it
            b"GET /" + b"x" * 70000,
            REST,
            b"414 Request-URI Too Long",
            id="request line too long",
        ),
    ],
)
def test_an_answer_sent_before_the_request_ends_is_read_by_a_client_still_sending_it(
    first: bytes, rest: list[bytes], status: bytes
) -> None:
    """The server answers a request it will not read (a body over the limit or unauthorized, a
    request line too long) as soon as it knows, and used to close with the rest unread: the
    connection was reset, and a client still sending (``http.client``, as a test of the events
    API found it now and then) got "broken pipe" in place of its answer. Now the server reads and
    drops the rest (bounded) until the client is done: the client sends all it meant to and
    reads the answer. The client here sends the rest only once the answer has come, so the order
    is certain."""
    server, port = http.serve(
        CollectorRegistry(),
        "127.0.0.1:0",
        routes={PATH: EventsApp(lambda _: None, token="t", max_bytes=1024)},
    )
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(first)
            reply = conn.recv(65536)  # the answer, sent before the request ended
            assert reply.split(b"\r\n")[0].split(b" ", 1)[1] == status
            for part in rest:  # the client goes on sending, as clients do
                conn.sendall(part)
            conn.shutdown(socket.SHUT_WR)
            while part := conn.recv(65536):  # and then reads to the end: a close, not a reset
                reply += part
    finally:
        http.stop(server)
    assert reply.split(b"\r\n")[0].split(b" ", 1)[1] == status


def test_a_client_that_neither_ends_its_body_nor_closes_is_let_go_after_the_linger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lingering close is bounded: a client that, answered, keeps its connection open
    without a word holds the server's thread for ``LINGER_S``, not for the server's life."""
    monkeypatch.setattr(http, "LINGER_S", 0.2)
    before = threading.active_count()
    server, port = http.serve(
        CollectorRegistry(), "127.0.0.1:0", routes={PATH: EventsApp(lambda _: None, max_bytes=8)}
    )
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 99\r\n\r\n".encode())
            assert b"413" in conn.recv(65536).split(b"\r\n")[0]
            assert closed_by_server(conn)  # and never sends the body, nor closes
            wait_until(  # the server's own thread alone
                lambda: threading.active_count() <= before + 1, what="the client's thread to end"
            )
    finally:
        http.stop(server)
