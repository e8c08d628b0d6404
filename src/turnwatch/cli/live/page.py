"""The live page: the sessions table, a Stop button per session, each stop's timeline.

A WSGI application served beside ``/metrics`` and ``POST /v1/events`` (``turnwatch demo --web``,
``turnwatch serve``). What it answers:

- ``GET /``: the page; ``GET /web/<file>``: its script, styles, and the browser module.
- ``GET /api/sessions``: every session as ``turnwatch sessions --json`` shows it, with
  ``since_ago`` (``3 h 12 min ago``, by this server's clock, as the commands say it) and what
  Stop and Recover can do for it.
- ``GET /api/sessions/<id>/timeline``: the stop's timeline, as ``turnwatch explain --json``.
- ``POST /api/sessions/<id>/stop``: ``agent.abort`` for the session, with the request's
  ``traceparent`` (the browser module's click), through ``stop``; answers the receipt. Only from
  the page's own origin (``403`` otherwise: another site's page cannot stop a session), and with
  the bearer token when the server has one (``401``; the page takes it from its URL's fragment,
  ``/#token=…``, which a browser never sends to a server).
- ``POST /api/sessions/<id>/recover``: with ``{"confirm": false}`` the plan (what recovery would
  do, nothing done or written), with ``{"confirm": true}`` the recovery itself; guarded as Stop.

Each session's row says whether Stop can work (``stop_unavailable``: why not) and whether
Recover would act (``recoverable``): :mod:`turnwatch.cli.live.actions`.

The page's Stop goes through the browser module (``web/turnwatch-stop.js``): the click and idle
as rendered are the browser's own events, posted to ``/v1/events``.
"""

from __future__ import annotations

import json
import mimetypes
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from turnwatch.cli.live.actions import CanStop, Recover
from turnwatch.exporters.http import RAW_URI
from turnwatch.runtime.model import TurnwatchError, parse_traceparent
from turnwatch.tracing import view
from turnwatch.tracing.ages import ago
from turnwatch.tracing.eventsapi import bearer_ok, same_origin
from turnwatch.tracing.ledger import LedgerError, connect
from turnwatch.watchdog.scan import Finding, annotated, apply_findings

#: The page's files: ``web/`` of the repository, installed as package data.
ASSETS = Path(__file__).resolve().parents[2] / "web"
_ASSET_NAME = re.compile(r"^[a-z][a-z0-9.-]*\.(?:js|css|html|d\.ts)$")

#: ``stop(session, traceparent)``: agent.abort for the session; returns the receipt. Raises
#: LookupError for a session it cannot stop (unknown, or no control endpoint recorded) and
#: :class:`StopFailed` when the runtime could not be reached or refused.
Stop = Callable[[str, str | None], str]
#: Without a watchdog beside the page, the sessions (and /proc) are read at most this often.
SCAN_EVERY_S = 1.0
#: The page lists every session still processing, and this many of the most recent others.
PAGE_SESSIONS = 200


class StopFailed(TurnwatchError):
    """The session's runtime could not be reached, or answered with an error."""


def stop_by_control(ledger: Path) -> Stop:
    """A Stop through the session's runtime control endpoint, as the ledger records it (the
    runtime's ``runtime.started``): ``agent.abort`` with source ``ui`` and the click's trace."""
    from turnwatch.runtime.model import StopSource
    from turnwatch.watchdog.control_client import ControlError, abort

    def stop(session: str, traceparent: str | None) -> str:
        conn = connect(ledger, readonly=True)
        try:
            row = conn.execute(
                "SELECT control FROM sessions WHERE session = ?", (session,)
            ).fetchone()
        finally:
            conn.close()
        if row is None:
            raise LookupError(f"unknown session {session!r}")
        if not row["control"]:
            raise LookupError(
                f"session {session!r}: its runtime recorded no control endpoint to stop it by"
            )
        try:
            return abort(row["control"], session, source=StopSource.UI, traceparent=traceparent)
        except ControlError as exc:
            raise StopFailed(str(exc)) from None

    return stop


StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class LivePage:
    """The page over the ledger at ``ledger``; ``before_read`` makes recent events visible (the
    demo flushes its writer), ``stop`` carries a click to the runtime.

    ``findings``, when given, are the watchdog's latest (a watchdog running beside the page);
    without it each read of the sessions scans ``/proc`` itself. Reading ``/proc`` holds the GIL
    for tens of milliseconds, which a runtime in the same process pays in its stop latency.
    """

    def __init__(
        self,
        ledger: Path,
        stop: Stop,
        *,
        before_read: Callable[[], object] | None = None,
        findings: Callable[[], Sequence[Finding]] | None = None,
        token: str | None = None,
        assets: Path = ASSETS,
        can_stop: CanStop | None = None,
        recover: Recover | None = None,
    ) -> None:
        self.ledger = ledger
        self.stop = stop
        self.can_stop = can_stop
        self.recover = recover
        self.before_read = before_read
        self.findings = findings
        self.token = token
        #: The last scan: when, the sessions it annotated, its findings.
        self._scanned: tuple[float, list[view.SessionView], list[Finding]] | None = None
        self._lock = threading.Lock()
        self._acting = threading.Lock()
        self.assets = assets

    def routes(self) -> dict[str, Callable[[dict[str, Any], StartResponse], Iterable[bytes]]]:
        """Where the page is served, as :func:`turnwatch.exporters.http.serve` takes routes."""
        return {"/": self, "/web/": self, "/api/": self}

    def __call__(self, environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        try:
            if path == "/":
                return self._asset("live.html", start)
            if path.startswith("/web/"):
                return self._asset(path.removeprefix("/web/"), start)
            if path == "/api/sessions" and method == "GET":
                return _json(start, "200 OK", self._sessions())
            parts = _segments(environ, path, "/api/sessions/")
            if parts is not None and len(parts) == 2:
                session = parts[0]
                if parts[1] == "timeline" and method == "GET":
                    return self._timeline(session, start)
                if parts[1] == "stop" and method == "POST":
                    return self._stop(session, environ, start)
                if parts[1] == "recover" and method == "POST":
                    return self._recover(session, environ, start)
        except LedgerError as exc:
            return _json(start, "503 Service Unavailable", {"error": str(exc)})
        except sqlite3.Error as exc:  # past opening it: a damaged page, a disk's I/O error
            error = f"{self.ledger}: unreadable ledger ({exc})"
            return _json(start, "503 Service Unavailable", {"error": error})
        return _json(start, "404 Not Found", {"error": f"no such page: {method} {path}"})

    def _conn(self) -> sqlite3.Connection:
        if self.before_read is not None:
            self.before_read()
        return connect(self.ledger, readonly=True)

    def _sessions(self) -> list[dict[str, Any]]:
        conn = self._conn()
        try:
            if self.findings is None:
                rows = self._scan(conn)
            else:
                rows = apply_findings(view.live_and_recent(conn, PAGE_SESSIONS), self.findings())
        finally:
            conn.close()
        return [self._row(r) for r in rows]

    def _row(self, r: view.SessionView) -> dict[str, Any]:
        """A session as the page shows it: the view, what Stop and Recover can do for it."""
        out = r.to_json()
        # How long ago, read as the commands read it and against the server's clock: the one
        # the recorded times were written by (a browser's may be hours off).
        out["since_ago"] = ago(r.since)
        out["stop_unavailable"] = self.can_stop(r) if self.can_stop is not None else None
        out["recoverable"] = self.recover is not None and bool(r.findings)
        return out

    def _scan(self, conn: sqlite3.Connection) -> list[view.SessionView]:
        return self._scan_whole(conn)[1]

    def _scan_whole(
        self, conn: sqlite3.Connection
    ) -> tuple[float, list[view.SessionView], list[Finding]]:
        with self._lock:  # one /proc read a second, however many pages poll
            now = time.monotonic()
            if self._scanned is None or now - self._scanned[0] >= SCAN_EVERY_S:
                self._scanned = (now, *annotated(conn, limit=PAGE_SESSIONS))
            return self._scanned

    def _findings(self, conn: sqlite3.Connection) -> Sequence[Finding]:
        """The findings a timeline is told: the watchdog's beside the page, else the page's own
        last scan (each poll of a timeline scanned /proc again; a page polls twice a second)."""
        if self.findings is not None:
            return self.findings()
        return self._scan_whole(conn)[2]

    def _timeline(self, session: str, start: StartResponse) -> Iterable[bytes]:
        from turnwatch.cli import waterfall  # rich, only for this route

        conn = self._conn()
        try:
            found = view.find_turn(conn, session)
            if found is None:
                return _json(start, "404 Not Found", {"error": f"unknown session {session!r}"})
            ex = waterfall.build(conn, *found, findings=self._findings(conn))
        finally:
            conn.close()
        body = asdict(ex)
        body["findings"] = [f.kind for f in ex.findings]
        body["total"] = ex.total
        return _json(start, "200 OK", body)

    def _refused(self, environ: dict[str, Any], start: StartResponse) -> Iterable[bytes] | None:
        """Another site's page, or no token where one is required: refused, nothing done."""
        origin = environ.get("HTTP_ORIGIN")
        if origin is not None and not same_origin(environ, origin):
            return _json(start, "403 Forbidden", {"error": f"origin {origin} may not act here"})
        if self.token is not None and not bearer_ok(environ, self.token):
            return _json(start, "401 Unauthorized", {"error": "a bearer token is required"})
        return None

    def _recover(
        self, session: str, environ: dict[str, Any], start: StartResponse
    ) -> Iterable[bytes]:
        refused = self._refused(environ, start)
        if refused is not None:
            return refused
        if self.recover is None:
            return _json(start, "404 Not Found", {"error": "this page does not recover"})
        try:
            size = int(environ.get("CONTENT_LENGTH") or 0)
            fits = 0 <= size <= 4096  # a negative length would read until the client hangs up
            body = json.loads(environ["wsgi.input"].read(size) or b"{}") if fits else None
        except (TimeoutError, ConnectionError):  # the client went silent mid-body, or away
            return _json(start, "408 Request Timeout", {"error": "the body did not arrive"})
        except (ValueError, KeyError):
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("confirm", False), bool):
            return _json(start, "400 Bad Request", {"error": 'body: {"confirm": true|false}'})
        conn = self._conn()
        try:
            known = conn.execute("SELECT 1 FROM sessions WHERE session = ?", (session,)).fetchone()
        finally:
            conn.close()
        if not known:
            return _json(start, "404 Not Found", {"error": f"unknown session {session!r}"})
        # One recovery at a time (its own lock: the page's reads go on meanwhile, a recovery
        # lasts its grace window), and the next read scans afresh.
        with self._acting:
            answer = self.recover(session, bool(body.get("confirm", False)))
        with self._lock:
            self._scanned = None
        return _json(start, "200 OK", answer)

    def _stop(self, session: str, environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        refused = self._refused(environ, start)
        if refused is not None:
            return refused
        tp = environ.get("HTTP_TRACEPARENT")
        try:
            tp = None if tp is None else parse_traceparent(tp)
        except ValueError as exc:
            return _json(start, "400 Bad Request", {"error": str(exc)})
        try:
            receipt = self.stop(session, tp)
        except LookupError as exc:
            return _json(start, "404 Not Found", {"error": str(exc.args[0] if exc.args else exc)})
        except StopFailed as exc:
            return _json(start, "502 Bad Gateway", {"error": str(exc)})
        return _json(start, "200 OK", {"session": session, "receipt": receipt})

    def _asset(self, name: str, start: StartResponse) -> Iterable[bytes]:
        file = self.assets / name
        if not _ASSET_NAME.match(name) or not file.is_file():
            return _json(start, "404 Not Found", {"error": f"no such file: {name}"})
        data = file.read_bytes()
        kind = "text/javascript" if name.endswith(".js") else mimetypes.guess_type(name)[0]
        start(
            "200 OK",
            [
                ("Content-Type", f"{kind or 'text/plain'}; charset=utf-8"),
                ("Content-Length", str(len(data))),
                ("Cache-Control", "no-cache"),
            ],
        )
        return [data]


def _segments(environ: dict[str, Any], path: str, prefix: str) -> list[str] | None:
    """The segments of the path under ``prefix``, each decoded once, as UTF-8; None if the path
    is not under it.

    From the request target as sent where the server gives it: in ``PATH_INFO`` an id's "%2F"
    is already a "/", and its "%25" a "%" that a second decoding would take for an escape.
    Elsewhere, ``PATH_INFO``'s Latin-1 text read back as the UTF-8 it was."""
    raw = environ.get(RAW_URI)
    if isinstance(raw, str) and raw.startswith(prefix):
        return [unquote(p) for p in raw.partition("?")[0][len(prefix) :].split("/")]
    if not path.startswith(prefix):
        return None
    try:
        rest = path[len(prefix) :].encode("latin-1").decode("utf-8")
    except UnicodeError:
        rest = path[len(prefix) :]
    return rest.split("/")


def _json(start: StartResponse, status: str, body: Any) -> list[bytes]:
    data = json.dumps(body, default=str).encode()
    start(
        status,
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(data))),
            ("Cache-Control", "no-store"),
        ],
    )
    return [data]
