"""The metrics endpoint: Prometheus text, or OpenMetrics (with exemplars) when the scraper asks;
and, beside it, whatever other routes a command serves (``POST /v1/events``)."""

from __future__ import annotations

import ipaddress
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from socketserver import ThreadingMixIn
from typing import IO, Any, cast
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

#: A WSGI application, as ``routes`` takes them.
WSGIApp = Callable[[dict[str, Any], Any], Iterable[bytes]]

DEFAULT_ADDR = "127.0.0.1:9464"
#: The WSGI environ key of the undecoded request target (path and query), where the server
#: gives it (this module's, and gunicorn's).
RAW_URI = "RAW_URI"
#: Seconds a client may stay silent (before its request, within its body, while its answer
#: waits to be taken) before the server lets it go. Each client has a thread of its own: one
#: that connected and went away without a word (a half-open connection, a scanner) held it for
#: the server's life. A scrape, a page's fetch or a batch of events takes milliseconds. (Its
#: connection then lingers, at most LINGER_S more.)
CLIENT_TIMEOUT_S = 30.0
#: After its answer, how long (seconds, in all) and how much (bytes) of a body the server did
#: not read it still takes from a client that is sending it, before it closes (see _linger).
LINGER_S = 2.0
LINGER_BYTES = 8 * 1024 * 1024


def parse_addr(addr: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9464`` for IPv6), checked: the port in range, an IP address valid,
    a host name resolvable. Anything else is a ValueError that says what is wrong."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"invalid address {addr!r}: expected HOST:PORT, e.g. {DEFAULT_ADDR}")
    if int(port) > 65535:
        raise ValueError(f"invalid address {addr!r}: port {port} is not in 0-65535")
    bracketed = host.startswith("[") and host.endswith("]")
    host = host[1:-1] if bracketed else host
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        if bracketed or _looks_numeric(host):
            raise ValueError(f"invalid address {addr!r}: {host!r} is not an IP address") from None
        try:
            socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        except OSError:
            raise ValueError(f"invalid address {addr!r}: cannot resolve {host!r}") from None
    else:
        if ip.version == 6 and not bracketed:
            raise ValueError(f"invalid address {addr!r}: write an IPv6 host as [{host}]:{port}")
    return host, int(port)


def format_addr(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets (``[::1]:9464``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _looks_numeric(host: str) -> bool:
    return all(part.isdigit() for part in host.split(".")) and "." in host


def serve(
    registry: CollectorRegistry,
    addr: str = DEFAULT_ADDR,
    *,
    routes: Mapping[str, WSGIApp] | None = None,
) -> tuple[WSGIServer, int]:
    """Serve ``/metrics`` (and ``routes``: path → WSGI app; a path ending in ``/`` also serves
    what is under it) in a daemon thread; returns the server and the bound port.

    A bad or busy address is a ValueError naming it (never a traceback)."""
    host, port = parse_addr(addr)
    try:
        metrics = make_wsgi_app(registry)
        table = dict(routes or {})
        # A route ending in "/" (but "/" itself) serves everything under it; the longest wins.
        prefixes = sorted((p for p in table if p.endswith("/") and p != "/"), key=len, reverse=True)

        def app(environ: dict[str, Any], start: Any) -> Any:
            path = environ.get("PATH_INFO", "")
            if path == "/metrics":
                return metrics(environ, start)
            route = table.get(path) or next(
                (table[p] for p in prefixes if path.startswith(p)), None
            )
            return (route or metrics)(environ, start)

        class Server(ThreadingMixIn, _LingeringServer):
            daemon_threads = True
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

            def handle_error(self, request: Any, client_address: Any) -> None:
                if not isinstance(sys.exc_info()[1], _GONE):
                    super().handle_error(request, client_address)
                # A client that went silent (the timeout) or away: its connection ends, and
                # there is nothing to say of it.

        class Quiet(WSGIRequestHandler):
            timeout = CLIENT_TIMEOUT_S

            def log_message(self, format: str, *args: Any) -> None:
                return

            def handle(self) -> None:
                # WSGIRequestHandler.handle, with an answerer that does not log a client that
                # stopped reading its answer (the timeout) as the application's error.
                self.raw_requestline = self.rfile.readline(65537)
                if len(self.raw_requestline) > 65536:
                    self.requestline = self.request_version = self.command = ""
                    self.send_error(414)
                    return
                if not self.parse_request():  # an error was sent
                    return
                chunked = self.headers.get("Transfer-Encoding", "").lower() == "chunked"
                handler = _Answer(
                    Dechunked(self.rfile) if chunked else self.rfile,
                    cast(IO[bytes], self.wfile),
                    self.get_stderr(),
                    self.get_environ(),
                    multithread=False,
                )
                handler.request_handler = self
                app = cast(WSGIServer, self.server).get_app()
                assert app is not None
                handler.run(app)

            def get_environ(self) -> dict[str, Any]:
                # The request target as sent, as gunicorn names it: PATH_INFO is decoded
                # (Latin-1, by PEP 3333), and a "%2F" in a path segment is then a "/".
                environ: dict[str, Any] = super().get_environ()
                environ[RAW_URI] = self.path
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    # wsgi.input is its chunks' data, read to its end (gunicorn's flag).
                    environ["wsgi.input_terminated"] = True
                return environ

        server = make_server(host, port, app, server_class=Server, handler_class=Quiet)
    except OSError as exc:
        raise ValueError(f"cannot listen on {addr}: {exc.strerror or exc}") from None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, int(server.server_port)


class Dechunked:
    """A chunked request body (RFC 9112 §7.1) as the data of its chunks, read as the app asks
    (so the app's own limit bounds it); a framing that is not HTTP's is a ValueError. wsgiref
    hands an app the raw stream, where a chunked body read as sized was empty: the events API
    answered "accepted": 0 for events it never saw."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._left = 0  # of the chunk being read
        self._done = False

    def read(self, size: int = -1) -> bytes:
        out = bytearray()
        while (size < 0 or len(out) < size) and not self._done:
            if self._left == 0 and not self._next_chunk():
                break
            want = self._left if size < 0 else min(self._left, size - len(out))
            data = self._raw.read(want)
            if len(data) != want:
                raise ValueError("malformed chunked body: a chunk is shorter than its size")
            out += data
            self._left -= want
            if self._left == 0 and self._raw.read(2) != b"\r\n":
                raise ValueError("malformed chunked body: a chunk not ended by CRLF")
        return bytes(out)

    def readline(self, size: int = -1) -> bytes:
        """WSGI's other reads (no app here uses them: a byte at a time is enough)."""
        out = bytearray()
        while size < 0 or len(out) < size:
            byte = self.read(1)
            out += byte
            if byte in (b"", b"\n"):
                break
        return bytes(out)

    def readlines(self, hint: int = -1) -> list[bytes]:
        return list(self)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.readline, b"")

    def _next_chunk(self) -> bool:
        head = self._raw.readline(1024)
        try:
            size = int(head.split(b";", 1)[0].strip(), 16)
        except ValueError:
            size = -1
        if size < 0:
            raise ValueError(f"malformed chunked body: chunk size {head[:40]!r}")
        if size == 0:
            while self._raw.readline(1024).strip():  # trailers, until the empty line
                pass
            self._done = True
            return False
        self._left = size
        return True


#: What a client that went silent (the timeout) or away raises where it is read or written.
_GONE = (TimeoutError, ConnectionError)


def _linger(conn: socket.socket) -> None:
    """End an answered connection so that its client reads the answer.

    An answer may come before the request it answers has all arrived (a ``413`` over the limit,
    a ``401``, a ``414`` for a request line over 64 KiB: the rest is not read). Closed with bytes
    unread, the connection is reset, and a client still sending gets "broken pipe" or
    "connection reset" in place of the answer already sent to it. So the answer's end is said
    first (``SHUT_WR``), then what the client goes on sending is read and dropped until it
    closes its end, for at most :data:`LINGER_S` seconds and :data:`LINGER_BYTES` bytes (a
    lingering close, as nginx and Apache do). A client that read its answer closes at once:
    nothing waits on it."""
    try:
        conn.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + LINGER_S
        left = LINGER_BYTES
        while left > 0 and (wait := deadline - time.monotonic()) > 0:
            conn.settimeout(wait)
            data = conn.recv(min(left, 65536))
            if not data:
                return
            left -= len(data)
    except OSError:  # gone, reset, or silent past the bound: closed as it is
        return


class _LingeringServer(WSGIServer):
    """A server whose every connection ends with :func:`_linger` (answered, refused before its
    application, timed out): socketserver ends each one in ``shutdown_request``."""

    def shutdown_request(self, request: Any) -> None:
        _linger(request)
        self.close_request(request)


class _Answer(ServerHandler):
    request_handler: WSGIRequestHandler

    def log_exception(self, exc_info: Any) -> None:
        if not isinstance(exc_info[1], _GONE):  # a client gone or silent: nothing to say
            super().log_exception(exc_info)


def url(addr: str, port: int) -> str:
    """The metrics URL of a server started on ``addr`` that bound ``port``."""
    return f"http://{format_addr(parse_addr(addr)[0], port)}/metrics"


def stop(server: WSGIServer) -> None:
    """Stop serving (tests and the demo)."""
    threading.Thread(target=server.shutdown, daemon=True).start()
    server.server_close()
