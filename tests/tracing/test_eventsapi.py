"""``POST /v1/events`` on a real ``turnwatch serve-metrics --events``: good batches recorded and
counted, and every bad request (bad lines, a huge body, no token, a foreign origin) refused with
its status and nothing stored."""

from __future__ import annotations

import http.client
import json
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import exchange, free_port
from turnwatch import names
from turnwatch.exporters import http as http_server
from turnwatch.runtime.events import Event
from turnwatch.tracing.eventsapi import EventsApp

ORIGIN = "http://ui.example"
TOKEN = "s3cret-token"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    ledger = tmp_path / "ledger.sqlite3"
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    port = free_port()
    exe = Path(sys.executable).with_name("turnwatch")
    # An empty ledger first (serve-metrics reads an existing one).
    subprocess.run([str(exe), "ingest", "-", "--ledger", str(ledger)], input=b"", check=True)
    argv = [str(exe), "serve-metrics", "--ledger", str(ledger)]
    argv += ["--metrics-addr", f"127.0.0.1:{port}", "--poll", "0.2", "--events"]
    argv += ["--token-file", str(token), "--cors-origin", ORIGIN, "--max-body", "65536"]
    proc = subprocess.Popen(
        argv,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(base + "/metrics", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        yield base, ledger
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)


def post(
    base: str,
    body: bytes,
    *,
    token: str | None = TOKEN,
    origin: str | None = None,
    timeout: float = 10,
) -> tuple[int, dict[str, object], dict[str, str]]:
    headers = {"Content-Type": "application/x-ndjson"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if origin is not None:
        headers["Origin"] = origin
    req = urllib.request.Request(base + "/v1/events", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), dict(e.headers)


def stored(ledger: Path) -> int:
    conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
    finally:
        conn.close()


def lines(*events: dict[str, object]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def stop_and_idle(t0: float) -> bytes:
    return lines(
        {"ts": t0, "kind": names.TURN_STARTED, "session": "b", "turn": "b.t1"},
        {
            "ts": t0 + 1,
            "kind": names.STOP_CLICKED,
            "session": "b",
            "turn": "b.t1",
            "attrs": {"source": "browser"},
        },
        {
            "ts": t0 + 1.2,
            "kind": names.TURN_SETTLED,
            "session": "b",
            "turn": "b.t1",
            "attrs": {"outcome": "aborted"},
        },
        {
            "ts": t0 + 1.3,
            "kind": names.PROCESSING_CLEARED,
            "session": "b",
            "turn": "b.t1",
            "attrs": {"source": "browser"},
        },
    )


def test_a_good_batch_is_recorded_and_observed(server: tuple[str, Path]) -> None:
    base, ledger = server
    status, body, headers = post(base, stop_and_idle(time.time() - 5), origin=ORIGIN)
    assert (status, body) == (200, {"accepted": 4})
    assert headers["Access-Control-Allow-Origin"] == ORIGIN
    assert stored(ledger) == 4  # durable before the reply
    again = post(base, stop_and_idle(time.time() - 5))  # another batch, other times: 4 more
    assert again[0] == 200
    deadline = time.monotonic() + 10
    while True:
        text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
        if "turnwatch_stop_to_idle_seconds_count" in text and 'mode="unknown"} 2.0' in text:
            break
        assert time.monotonic() < deadline, text
        time.sleep(0.2)


def test_bad_requests_get_their_status_and_store_nothing(server: tuple[str, Path]) -> None:
    base, ledger = server
    good = stop_and_idle(time.time())
    bad = good + b'{"ts": 1, "kind": "stop.clicke", "session": "b"}\n' + b"not json\n"
    status, body, _ = post(base, bad)
    assert status == 400
    reported = body["bad"]
    assert isinstance(reported, list)
    assert [b["line"] for b in reported] == [5, 6]
    assert "did you mean stop.clicked" in str(body)
    assert post(base, b"x" * 70000)[0] == 413
    assert post(base, good, token=None)[0] == 401
    assert post(base, good, token="wrong")[0] == 401
    assert post(base, good, origin="http://evil.example")[0] == 403
    assert stored(ledger) == 0  # none of these stored anything, not even their good lines
    # The server's own origin (a page served beside the endpoint) needs no allow-list entry.
    assert post(base, good, origin=base)[0] == 200
    assert stored(ledger) == 4  # none of these stored anything, not even their good lines


def test_a_preflight_from_an_allowed_origin_gets_cors_headers(server: tuple[str, Path]) -> None:
    base, _ledger = server
    req = urllib.request.Request(base + "/v1/events", method="OPTIONS", headers={"Origin": ORIGIN})
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 204
        assert r.headers["Access-Control-Allow-Origin"] == ORIGIN
        assert "POST" in r.headers["Access-Control-Allow-Methods"]


def test_a_batch_the_ledger_could_not_commit_is_not_said_recorded(server: tuple[str, Path]) -> None:
    """Another writer holds the ledger's lock past the busy timeout (a ``prune --vacuum``
    rewriting it): the events wait in the writer's backlog, not in the file. The reply said
    ``200 accepted`` all the same, and a runtime or a page took them as durable. It is a ``503``
    saying so; the batch sent again once the lock is gone is kept once."""
    base, ledger = server
    batch = stop_and_idle(time.time() - 5)
    holder = sqlite3.connect(ledger, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        status, body, headers = post(base, batch, timeout=60)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert status == 503, body
    assert "not yet recorded" in str(body["error"])
    assert headers["Retry-After"] == "5"
    deadline = time.monotonic() + 30
    while True:
        status, body, _ = post(base, batch)
        if status == 200:
            break
        assert time.monotonic() < deadline, body
        time.sleep(0.5)
    assert stored(ledger) == 4  # the backlog's and the retry's, once


def chunked(base: str, parts: list[bytes]) -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection(base.removeprefix("http://"), timeout=10)
    try:
        conn.request(
            "POST",
            "/v1/events",
            body=iter(parts),
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-ndjson"},
            encode_chunked=True,
        )
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def test_a_chunked_body_is_read_not_taken_for_an_empty_one(server: tuple[str, Path]) -> None:
    """A body sent chunked (no Content-Length: a streaming client, ``curl -T -``) was read as
    empty and answered 200 ``{"accepted": 0}``: the client dropped events the server never
    saw. Now its chunks are read (bounded by ``--max-body`` as they come)."""
    base, ledger = server
    batch = stop_and_idle(time.time())
    assert chunked(base, [batch[:100], batch[100:]]) == (200, {"accepted": 4})
    assert stored(ledger) == 4
    status, said = chunked(base, [b"x" * 40000, b"x" * 40000])  # over --max-body 65536
    assert status == 413, said
    assert stored(ledger) == 4


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"zz\r\nabc\r\n0\r\n\r\n", id="a size that is not hex"),
        pytest.param(b"10\r\nabc\r\n0\r\n\r\n", id="a chunk shorter than its size"),
        pytest.param(b"3\r\nabcXX0\r\n\r\n", id="a chunk not ended by CRLF"),
    ],
)
def test_a_chunked_body_framed_wrong_is_a_400_and_records_nothing(body: bytes) -> None:
    recorded: list[list[Event]] = []
    server, port = http_server.serve(
        CollectorRegistry(), "127.0.0.1:0", routes={"/v1/events": EventsApp(recorded.append)}
    )
    request = b"POST /v1/events HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    try:
        reply = exchange(port, request + body, half_close=True)
    finally:
        http_server.stop(server)
    assert reply.split(b"\r\n", 1)[0].endswith(b"400 Bad Request"), reply
    assert b"malformed chunked body" in reply
    assert recorded == []
