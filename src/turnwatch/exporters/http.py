"""The metrics endpoint: Prometheus text, or OpenMetrics (with exemplars) when the scraper asks."""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

DEFAULT_ADDR = "127.0.0.1:9464"


def parse_addr(addr: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9464`` for IPv6); a ValueError that says what is wrong."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"invalid address {addr!r}: expected HOST:PORT, e.g. {DEFAULT_ADDR}")
    return host.strip("[]"), int(port)


def serve(registry: CollectorRegistry, addr: str = DEFAULT_ADDR) -> tuple[WSGIServer, int]:
    """Serve ``/metrics`` in a daemon thread; returns the server and the bound port."""
    host, port = parse_addr(addr)
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server, int(server.server_port)


def stop(server: WSGIServer) -> None:
    """Stop serving (tests and the demo)."""
    threading.Thread(target=server.shutdown, daemon=True).start()
    server.server_close()
