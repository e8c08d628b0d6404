"""Exporters configured the way the OpenTelemetry SDK is: by its variables and entry points.

The exporters here are the SDK's own, sending to real sockets: a closed port, then a small HTTP
server that takes OTLP requests. A backend of record (Phoenix) is in ``test_phoenix.py``.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExportResult

from tests.conftest import free_port, one_line_exit_2, turnwatch, wait_until
from turnwatch.exporters import otel

CLEAN = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({}, []),
        ({"OTEL_TRACES_EXPORTER": "none"}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}, ["otlp_proto_http"]),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, ["otlp_proto_http"]),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            ["otlp_proto_grpc"],
        ),
        (  # the signal's own variable wins over the general one
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            },
            ["otlp_proto_http"],
        ),
        ({"OTEL_TRACES_EXPORTER": "otlp_proto_grpc"}, ["otlp_proto_grpc"]),
        ({"OTEL_TRACES_EXPORTER": " OTLP , console "}, ["otlp_proto_http", "console"]),
        ({"OTEL_TRACES_EXPORTER": "otlp,otlp_proto_http"}, ["otlp_proto_http"]),
    ],
)
def test_the_variables_name_the_sdks_exporters(env: dict[str, str], names: list[str]) -> None:
    assert otel.exporter_names(env) == names


def test_each_name_builds_the_sdks_own_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp_proto_http,otlp_proto_grpc,console")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3")
    built = otel.exporters()
    assert [type(e) for _n, e in built] == [OTLPSpanExporter, GrpcExporter, ConsoleSpanExporter]
    for _name, exporter in built:
        exporter.shutdown()


def test_the_resource_is_the_sdks_with_our_name_as_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "openinference.project.name=p,team=sre")
    attrs = otel.resource("turnwatch").attributes
    assert (attrs["service.name"], attrs["openinference.project.name"]) == ("turnwatch", "p")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=fleet-a")
    assert otel.resource("turnwatch").attributes["service.name"] == "fleet-a"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "fleet-b")
    assert otel.resource("turnwatch").attributes["service.name"] == "fleet-b"


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with exactly these OTEL_* variables."""
    return turnwatch(*args, env=CLEAN | env, timeout=120)


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, ["OTEL_TRACES_EXPORTER", "'zipkin'", "console"]),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
            ["OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "grpc"],
        ),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"},
            ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "'udp'"],
        ),
    ],
)
# `watch --once` alone only looks: it builds no spans, so it reads no exporter configuration.
@pytest.mark.parametrize("command", ["demo", "watch --once --recover", "ingest"])
def test_what_cannot_be_had_is_one_line_and_exit_2_before_anything_is_written(
    tmp_path: Path, env: dict[str, str], words: list[str], command: str
) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    source = tmp_path / "events.jsonl"
    source.write_text("")
    if command.startswith("watch"):  # it reads an existing ledger
        run({}, "ingest", str(source), "--ledger", str(ledger))
    args = [*command.split(), "--ledger", str(ledger)] + (
        [str(source)] if command == "ingest" else []
    )
    before = ledger.exists()
    one_line_exit_2(run(env, *args), *words)
    assert ledger.exists() == before


def without_the_grpc_extra(tmp_path: Path) -> Path:
    """A ``sys.path`` entry holding every installed distribution except the gRPC exporter's:
    what a machine that installed ``turnwatch[otlp]`` only has."""
    site = next(Path(p) for p in sys.path if p.endswith("site-packages"))
    view = tmp_path / "site"
    view.mkdir()
    for entry in site.iterdir():
        if not entry.name.startswith("opentelemetry_exporter_otlp_proto_grpc-"):
            (view / entry.name).symlink_to(entry)
    return view


def test_an_extra_not_installed_is_named_with_its_install_command(tmp_path: Path) -> None:
    view = without_the_grpc_extra(tmp_path)
    src = Path(__file__).parents[2] / "src"
    result = subprocess.run(
        [sys.executable, "-S", "-c", "from turnwatch.cli.app import main; main()", "demo"],
        env=CLEAN
        | {
            "PYTHONPATH": f"{src}{os.pathsep}{view}",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    one_line_exit_2(result, "otlp_proto_grpc", "pip install 'turnwatch[otlp-grpc]'")


class _Collector(http.server.BaseHTTPRequestHandler):
    """Takes OTLP/HTTP requests and answers 200, counting them."""

    requests = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).requests += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def collector_later() -> Iterator[tuple[int, threading.Event]]:
    """A port with nothing on it until the test sets the event; then a collector."""
    port, start = free_port(), threading.Event()
    servers: list[http.server.HTTPServer] = []

    def serve() -> None:
        start.wait()
        server = http.server.HTTPServer(("127.0.0.1", port), _Collector)
        servers.append(server)
        server.serve_forever(poll_interval=0.05)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port, start
    start.set()
    wait_until(lambda: servers, what="the collector to start")
    servers[0].shutdown()
    servers[0].server_close()
    thread.join(5)


def one_span() -> list[ReadableSpan]:
    provider = TracerProvider()
    span = provider.get_tracer("t").start_span("s")
    span.end()
    assert isinstance(span, ReadableSpan)
    return [span]


def test_a_backend_down_is_said_once_then_batches_drop_until_it_is_back(
    collector_later: tuple[int, threading.Event],
) -> None:
    port, start = collector_later
    said: list[str] = []
    # A timeout that leaves room for one retry: the retry's warning carries the reason.
    inner = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=3)
    exporter = otel.Reported(inner, "otlp_proto_http", said.append, cool_down_s=0.2)

    assert exporter.export(one_span()) is SpanExportResult.FAILURE
    assert len(said) == 1
    assert "cannot deliver (Connection refused)" in said[0]
    assert f"127.0.0.1:{port}" in said[0]
    for _ in range(5):  # while down: dropped at once, said no more
        assert exporter.export(one_span()) is SpanExportResult.FAILURE
    assert len(said) == 1
    assert exporter.dropped == 6

    start.set()  # the backend comes up; after the cool-down the next batch goes through
    time.sleep(0.3)
    assert exporter.export(one_span()) is SpanExportResult.SUCCESS
    assert said[1:] == [
        f"traces: otlp_proto_http to http://127.0.0.1:{port}/v1/traces delivers again"
    ]
    assert _Collector.requests == 1
    exporter.shutdown()
    assert said[-1].startswith("traces: 6 span(s) were not delivered")


def test_the_cli_says_a_down_backend_once_and_finishes(tmp_path: Path) -> None:
    """Many batches (two spans each) to a closed port: one line says so, the run exits 0, and
    no exporter traceback or per-retry warning reaches the terminal."""
    result = run(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        },
        "demo",
        "--json",
        "--ledger",
        str(tmp_path / "ledger.sqlite3"),
    )
    assert result.returncode == 0, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if not ln.lstrip().startswith("·")]
    said = [ln for ln in lines if "traces:" in ln]
    assert len([ln for ln in said if "cannot deliver" in ln]) == 1, result.stderr
    assert "Transient error" not in result.stderr
    assert "Traceback" not in result.stderr


def test_a_span_with_text_utf8_cannot_carry_is_delivered_with_its_batch() -> None:
    """A tool or session name decoded with surrogateescape made the OTLP encoder raise: the
    batch (up to 512 spans, of every session) was lost, and the backend was said to be down
    and skipped for the cool-down. The name goes escaped, as the ledger keeps it."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.trace import Status, StatusCode

    bodies: list[bytes] = []

    class Keeping(_Collector):
        def do_POST(self) -> None:
            bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.end_headers()

    server = http.server.HTTPServer(("127.0.0.1", 0), Keeping)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}).start()
    try:
        said: list[str] = []
        port = server.server_address[1]
        inner = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=3)
        exporter = otel.Reported(inner, "otlp_proto_http", said.append)
        tracer = TracerProvider().get_tracer("t")
        odd = tracer.start_span("execute_tool Grep\udcff", attributes={"session": "s\udcfe"})
        odd.add_event("grace.expired", {"why": "x\udcfd"})
        odd.set_status(Status(StatusCode.ERROR, "failed on \udcfc"))
        odd.end()
        assert isinstance(odd, ReadableSpan)
        spans = [*one_span(), odd, *one_span()]
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        assert said == []
        (body,) = bodies
        got = ExportTraceServiceRequest.FromString(body).resource_spans[0].scope_spans[0].spans
        assert [s.name for s in got] == ["s", "execute_tool Grep\\udcff", "s"]
        assert got[1].attributes[0].value.string_value == "s\\udcfe"
        assert got[1].events[0].attributes[0].value.string_value == "x\\udcfd"
        assert got[1].status.message == "failed on \\udcfc"
        assert otel.encodable(spans[0]) is spans[0]  # the usual span is not copied
    finally:
        server.shutdown()
        server.server_close()
