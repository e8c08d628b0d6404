"""The live page's HTTP side without a browser: what each bad request gets, and that nothing is
stopped by one."""

from __future__ import annotations

import io
import json
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote
from wsgiref.util import setup_testing_defaults

import pytest
from prometheus_client import CollectorRegistry

from tests import streams
from turnwatch import names
from turnwatch.cli.live.page import LivePage, StopFailed
from turnwatch.exporters import http
from turnwatch.runtime.events import Event
from turnwatch.tracing.ledger import Ledger

TP = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"


@pytest.fixture
def page(tmp_path: Path) -> tuple[LivePage, list[tuple[str, str | None]]]:
    path = streams.ledger(tmp_path / "ledger.sqlite3")
    stopped: list[tuple[str, str | None]] = []

    def stop(session: str, traceparent: str | None) -> str:
        if session == "gone":
            raise StopFailed("the runtime's socket: connection refused")
        if session != "s1":
            raise LookupError(f"unknown session {session!r}")
        stopped.append((session, traceparent))
        return "accepted"

    return LivePage(path, stop, token="t0k"), stopped


def call(app: LivePage, method: str, path: str, **headers: str) -> tuple[int, Any]:
    environ: dict[str, Any] = {"REQUEST_METHOD": method, "PATH_INFO": path}
    setup_testing_defaults(environ)
    environ["wsgi.input"] = io.BytesIO(b"")
    environ.update({"HTTP_" + k.upper(): v for k, v in headers.items()})
    got: list[str] = []
    body = b"".join(app(environ, lambda status, _h: got.append(status)))
    ctype = "json" if body.startswith((b"{", b"[")) else "text"
    return int(got[0].split()[0]), json.loads(body) if ctype == "json" else body.decode()


def test_each_bad_request_gets_its_status_and_stops_nothing(page: Any) -> None:
    app, stopped = page
    auth = "Bearer t0k"
    assert call(app, "POST", "/api/sessions/s1/stop")[0] == 401
    assert call(app, "POST", "/api/sessions/s1/stop", authorization="Bearer no")[0] == 401
    foreign = {"authorization": auth, "origin": "http://evil.example"}
    assert call(app, "POST", "/api/sessions/s1/stop", **foreign)[0] == 403
    assert call(app, "POST", "/api/sessions/s1/stop", authorization=auth, traceparent="x")[0] == 400
    status, body = call(app, "POST", "/api/sessions/nope/stop", authorization=auth)
    assert (status, body["error"]) == (404, "unknown session 'nope'")
    assert call(app, "POST", "/api/sessions/gone/stop", authorization=auth)[0] == 502
    assert call(app, "GET", "/api/sessions/s1/stop")[0] == 404  # a GET never stops
    assert stopped == []
    own = {"authorization": auth, "origin": "http://127.0.0.1", "traceparent": TP}
    assert call(app, "POST", "/api/sessions/s1/stop", **own) == (
        200,
        {"session": "s1", "receipt": "accepted"},
    )
    assert stopped == [("s1", TP)]


def test_pages_and_reads(page: Any) -> None:
    app, _ = page
    status, html = call(app, "GET", "/")
    assert status == 200
    assert "/web/live.js" in html
    assert call(app, "GET", "/web/turnwatch-stop.js")[0] == 200
    for bad in ("/web/../pyproject.toml", "/web/nope.js", "/web/.hidden.js", "/elsewhere"):
        assert call(app, "GET", bad)[0] == 404, bad
    status, sessions = call(app, "GET", "/api/sessions")
    assert status == 200
    states = {s["session"]: s["state"] for s in sessions}
    assert states == {
        "idle": "idle",
        "busy": "processing",
        "stopping": "stopping",
        "pinned": "pinned",
    }
    assert "pinned_session" in next(s for s in sessions if s["session"] == "pinned")["findings"]
    status, timeline = call(app, "GET", "/api/sessions/pinned/timeline")
    assert status == 200
    assert (timeline["session"], timeline["turn"], timeline["state"]) == ("pinned", "p1", "pinned")
    assert [label for _off, label, _d in timeline["steps"]][:2] == [
        "Stop clicked",
        "agent.abort received",
    ]
    assert timeline["reasons"]
    assert call(app, "GET", "/api/sessions/nope/timeline")[0] == 404


def test_each_bad_recover_request_gets_its_status_and_recovers_nothing(tmp_path: Path) -> None:
    """Recover is guarded as Stop is (the token, the page's own origin), takes only
    ``{"confirm": bool}``, and acts only when confirmed."""
    path = streams.ledger(tmp_path / "ledger.sqlite3")
    asked: list[tuple[str, bool]] = []

    def recover(session: str, confirm: bool) -> dict[str, Any]:
        asked.append((session, confirm))
        return {"session": session, "done": confirm, "actions": []}

    app = LivePage(path, lambda _s, _t: "accepted", token="t0k", recover=recover)
    auth = "Bearer t0k"

    def post(session: str, body: bytes, **headers: str) -> int:
        environ: dict[str, Any] = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": f"/api/sessions/{session}/recover",
        }
        setup_testing_defaults(environ)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        environ.update({"HTTP_" + k.upper(): v for k, v in headers.items()})
        got: list[str] = []
        b"".join(app(environ, lambda status, _h: got.append(status)))
        return int(got[0].split()[0])

    assert post("s1", b'{"confirm": true}') == 401
    assert post("s1", b'{"confirm": true}', authorization=auth, origin="http://evil.example") == 403
    assert post("s1", b'{"confirm": "yes"}', authorization=auth) == 400
    assert post("s1", b"not json", authorization=auth) == 400
    assert post("s1", b"x" * 5000, authorization=auth) == 400
    assert post("nope", b'{"confirm": true}', authorization=auth) == 404
    assert asked == []
    assert post("pinned", b'{"confirm": false}', authorization=auth) == 200
    assert post("pinned", b'{"confirm": true}', authorization=auth) == 200
    assert asked == [("pinned", False), ("pinned", True)]
    rows = call(app, "GET", "/api/sessions")[1]
    assert all("stop_unavailable" in r and "recoverable" in r for r in rows)


#: Session ids the runtimes people run do use (a LangGraph thread "team/alice", a user's own
#: words), each listed by the page and then asked for by the id it listed.
ODD_IDS = ["team/alice/42", "café", "50%41off", "a%2Fb", "x y", "q?x=1", "h#1", "日本/語", "+plus"]


def test_every_listed_session_is_found_by_its_own_id(tmp_path: Path) -> None:
    """Through the real server, as the page's script asks (``encodeURIComponent``): before,
    an id with a "/" was "no such page", a non-ASCII one and one with "%" an "unknown session"
    (the path was decoded twice, and as Latin-1)."""
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    for sid in ODD_IDS:
        ledger.append(Event(names.TURN_STARTED, sid, time.time() - 10, turn=f"{sid}.t1"))
    ledger.close()
    stopped: list[str] = []

    def stop(session: str, _tp: str | None) -> str:
        stopped.append(session)
        return "accepted"

    page = LivePage(path, stop, token="t0k")
    server, port = http.serve(CollectorRegistry(), "127.0.0.1:0", routes=page.routes())
    base = f"http://127.0.0.1:{port}"
    try:
        with urllib.request.urlopen(f"{base}/api/sessions") as r:
            listed = [row["session"] for row in json.load(r)]
        assert sorted(listed) == sorted(ODD_IDS)
        for sid in listed:
            where = f"{base}/api/sessions/{quote(sid, safe='')}"
            with urllib.request.urlopen(f"{where}/timeline") as r:
                assert json.load(r)["session"] == sid
            asked = urllib.request.Request(
                f"{where}/stop", method="POST", headers={"Authorization": "Bearer t0k"}
            )
            with urllib.request.urlopen(asked) as r:
                assert json.load(r) == {"session": sid, "receipt": "accepted"}
    finally:
        http.stop(server)
    assert stopped == listed


def test_under_another_wsgi_server_a_non_ascii_id_is_found_too(tmp_path: Path) -> None:
    """A server that gives no ``RAW_URI`` (an embedder mounting ``LivePage.routes()``) passes
    ``PATH_INFO`` as PEP 3333 says: the path's bytes, decoded as Latin-1. The page reads them
    back as the UTF-8 they were (before: "unknown session 'cafÃ©'")."""
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    ledger.append(Event(names.TURN_STARTED, "café", time.time() - 10, turn="café.t1"))
    ledger.close()
    app = LivePage(path, lambda _s, _t: "accepted")

    status, timeline = call(app, "GET", "/api/sessions/café/timeline".encode().decode("latin-1"))

    assert status == 200, timeline
    assert timeline["session"] == "café"
