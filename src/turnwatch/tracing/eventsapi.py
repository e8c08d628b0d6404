"""``POST /v1/events``: turnwatch events over HTTP (a browser's click and idle, a foreign runtime),
JSON lines in the schema ``turnwatch ingest`` reads, with the same validation.

A WSGI application. What it answers:

- ``200`` ``{"accepted": N}``: every line was good, and every event is recorded.
- ``400`` ``{"bad": [{"line": N, "reason": "..."}]}``: some line was bad; **nothing** of the
  request is recorded (a request is one batch: its good lines are committed with it, or not at
  all, so a retry after fixing the bad line stores each event once).
- ``503`` ``{"error": "..."}`` with ``Retry-After``: the ledger could not commit the batch in
  time (another writer holds its lock, the disk is full) or dropped some of it; send it again
  (events sent twice are kept once).
- ``408`` when the body stops arriving (the server's ``CLIENT_TIMEOUT_S``): nothing recorded.
- ``413`` over ``max_bytes``, read no further (a chunked body is read as its chunks come);
  ``401`` without the bearer token when one is set; ``403`` from another origin than the
  server's own that is not on the allow-list (a browser sends ``Origin`` with every POST, so a
  page served beside the endpoint, as turnwatch's live page is, needs no entry); ``405`` for
  any other method; ``404`` elsewhere. A preflight ``OPTIONS`` from an allowed origin gets the
  CORS headers.
"""

from __future__ import annotations

import hmac
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from turnwatch.runtime.events import Event
from turnwatch.runtime.model import TurnwatchError
from turnwatch.tracing.ingest import BadLine, parse_line
from turnwatch.tracing.ledger import Ledger
from turnwatch.tracing.pipeline import Telemetry

PATH = "/v1/events"
#: The default limit of a request's body: a browser's batch is a few kilobytes.
MAX_BYTES = 1024 * 1024

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


#: Seconds a client is asked to wait before sending a batch the ledger could not commit again.
RETRY_AFTER_S = 5


class NotRecorded(TurnwatchError):
    """What ``record`` raises when a batch is not durable when it returns: why, in words."""


class EventsApp:
    """The endpoint, handing each good request's events to ``record`` as one batch, which
    returns once they are durable (the reply says they are) or raises :class:`NotRecorded`."""

    def __init__(
        self,
        record: Callable[[list[Event]], None],
        *,
        token: str | None = None,
        origins: Sequence[str] = (),
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.record = record
        self.token = token
        self.origins = frozenset(origins)
        self.max_bytes = max_bytes

    def __call__(self, environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        origin = environ.get("HTTP_ORIGIN")
        cors: list[tuple[str, str]] = []
        if origin is not None and not same_origin(environ, origin):
            if origin not in self.origins:
                return _reply(start, "403 Forbidden", {"error": f"origin {origin} not allowed"})
            cors = [
                ("Access-Control-Allow-Origin", origin),
                ("Vary", "Origin"),
                ("Access-Control-Allow-Headers", "Authorization, Content-Type"),
                ("Access-Control-Allow-Methods", "POST, OPTIONS"),
            ]
        if method == "OPTIONS":
            start("204 No Content", cors)
            return [b""]
        if method != "POST":
            return _reply(start, "405 Method Not Allowed", {"error": "POST only"}, cors)
        if self.token is not None and not bearer_ok(environ, self.token):
            return _reply(start, "401 Unauthorized", {"error": "a bearer token is required"}, cors)
        too_large = {"error": f"the body is over the {self.max_bytes}-byte limit (or unsized)"}
        try:
            body = _body(environ, self.max_bytes)
        except (TimeoutError, ConnectionError):  # the client went silent mid-body, or away
            return _reply(
                start,
                "408 Request Timeout",
                {"error": "the body did not arrive in time; nothing was recorded"},
                cors,
            )
        except ValueError as exc:  # a chunked body whose framing is not HTTP's
            return _reply(start, "400 Bad Request", {"error": str(exc), "accepted": 0}, cors)
        if body is None:
            return _reply(start, "413 Content Too Large", too_large, cors)
        events, bad = parse_body(body)
        if bad:
            lines = [{"line": b.lineno, "reason": b.reason} for b in bad[:100]]
            return _reply(start, "400 Bad Request", {"bad": lines, "accepted": 0}, cors)
        try:
            self.record(events)
        except NotRecorded as exc:
            retry = [("Retry-After", str(RETRY_AFTER_S))]
            return _reply(start, "503 Service Unavailable", {"error": str(exc)}, cors + retry)
        return _reply(start, "200 OK", {"accepted": len(events)}, cors)


def recorder(telemetry: Telemetry, ledger: Ledger) -> Callable[[list[Event]], None]:
    """``record`` for :class:`EventsApp`: a request's events into ``telemetry`` together (one
    request at a time), and committed to ``ledger`` before the reply says they are; raises
    :class:`NotRecorded` when they are not (they may still be written from the writer's
    backlog: a batch sent again is kept once)."""
    lock = threading.Lock()

    def record(batch: list[Event]) -> None:
        with lock:
            lost = ledger.lost
            for ev in batch:
                telemetry.foreign(ev)
            if not ledger.flush(timeout=30):
                why = ledger.failing or "the writer is more than 30 s behind"
                raise NotRecorded(f"not yet recorded: {ledger.path}: {why}; send them again")
            if ledger.lost != lost:
                raise NotRecorded(
                    f"not recorded: {ledger.path}: {ledger.lost_why}; send them again"
                )

    return record


def _body(environ: dict[str, Any], most: int) -> bytes | None:
    """The request's body, or None over ``most`` bytes (or unsized). A chunked one is read as
    the server decodes it (``wsgi.input_terminated``: this package's server, gunicorn); a
    server that hands over the raw chunks could only have it read as empty, and a client then
    drops events never recorded: refused as unsized."""
    stream = environ["wsgi.input"]
    if environ.get("wsgi.input_terminated"):
        data: bytes = stream.read(most + 1)
        return data if len(data) <= most else None
    if environ.get("HTTP_TRANSFER_ENCODING"):
        return None
    try:
        size = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None
    if size < 0 or size > most:
        return None
    return stream.read(size) if size else b""


def parse_body(body: bytes) -> tuple[list[Event], list[BadLine]]:
    """A request's lines: its events, and its bad lines (by number, from 1)."""
    events: list[Event] = []
    bad: list[BadLine] = []
    for lineno, raw in enumerate(body.split(b"\n"), start=1):
        parsed = parse_line(raw, lineno)
        if isinstance(parsed, BadLine):
            bad.append(parsed)
        elif parsed is not None:
            events.append(parsed)
    return events, bad


def same_origin(environ: dict[str, Any], origin: str) -> bool:
    """The request's ``Origin`` is the server's own (its scheme and ``Host``)."""
    host = environ.get("HTTP_HOST")
    return host is not None and origin == f"{environ.get('wsgi.url_scheme', 'http')}://{host}"


def bearer_ok(environ: dict[str, Any], token: str) -> bool:
    """The request carries ``Authorization: Bearer <token>`` (compared in constant time)."""
    given = str(environ.get("HTTP_AUTHORIZATION") or "")
    scheme, _, value = given.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip(), token)


def _reply(
    start: StartResponse,
    status: str,
    body: dict[str, Any],
    headers: list[tuple[str, str]] | None = None,
) -> list[bytes]:
    data = json.dumps(body).encode()
    start(
        status,
        [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
        + (headers or []),
    )
    return [data]
