"""The demo's traces in a real OTLP backend (Arize Phoenix), over HTTP and over gRPC.

Read back through Phoenix's REST API: every span the ledger names arrived, one trace per stop,
each ``abort.walk`` with as many ``tools.abort`` children as calls were in flight, ERROR only
where ``error.type`` says why; and a file ingested twice sends its spans once.

CI installs Phoenix (``make phoenix``) and sets ``TURNWATCH_REQUIRE_PHOENIX=1``; elsewhere the
test skips, naming that command.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port, turnwatch, wait_until
from tests.exporters.phoenix import SETUP, VERSION, Phoenix, executable, serve
from turnwatch import names
from turnwatch.tracing.ledger import connect, read_events

pytestmark = pytest.mark.slow
STOP_PATH = (
    names.STOP_CLICKED,
    names.ABORT_RPC_RECEIVED,
    names.ABORT_WALK_STARTED,
    names.TURN_SETTLED,
)


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    exe = executable()
    if exe is None:
        if os.environ.get("TURNWATCH_REQUIRE_PHOENIX") == "1":
            pytest.fail(f"TURNWATCH_REQUIRE_PHOENIX=1 but Arize Phoenix is not set up: {SETUP}")
        pytest.skip(f"Arize Phoenix {VERSION} is not set up here; set it up with: {SETUP}")
    with serve(exe, tmp_path_factory.mktemp("phoenix"), free_port(), free_port()) as p:
        yield p


def otlp_env(phoenix: Phoenix, protocol: str, project: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    endpoint = (
        phoenix.base if protocol == "http/protobuf" else f"http://127.0.0.1:{phoenix.grpc_port}"
    )
    return env | {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}",
    }


def exported(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """turnwatch with an exporter: it succeeds, and never said the backend was down."""
    result = turnwatch(*args, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "cannot deliver" not in result.stderr, result.stderr
    return result


def ledger_span_ids(path: Path) -> set[str]:
    conn = connect(path, readonly=True)
    try:
        rows = conn.execute("SELECT DISTINCT span_id FROM events WHERE span_id IS NOT NULL")
        return {r[0] for r in rows}
    finally:
        conn.close()


def stops_in(path: Path) -> int:
    """How many stops the ledger holds: the distinct traces of its stop-path events."""
    conn = connect(path, readonly=True)
    try:
        marks = ",".join("?" * len(STOP_PATH))
        sql = f"SELECT count(DISTINCT trace_id) FROM events WHERE kind IN ({marks})"
        return int(conn.execute(sql, STOP_PATH).fetchone()[0])
    finally:
        conn.close()


def arrived(phoenix: Phoenix, project: str, want: set[str]) -> list[dict[str, Any]]:
    """The project's spans, once every one of ``want`` is there."""
    got: list[dict[str, Any]] = []

    def all_there() -> bool:
        nonlocal got
        got = phoenix.spans(project)
        return want <= {s["context"]["span_id"] for s in got}

    wait_until(all_there, timeout=60, what=f"{len(want)} spans in Phoenix project {project}")
    return got


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_the_demo_arrives_whole_in_one_trace_per_stop(
    phoenix: Phoenix, tmp_path: Path, protocol: str
) -> None:
    project = "turnwatch-demo-" + protocol.split("/")[0]
    ledger = tmp_path / "ledger.sqlite3"
    exported(otlp_env(phoenix, protocol, project), "demo", "--json", "--ledger", str(ledger))

    want = ledger_span_ids(ledger)
    spans = arrived(phoenix, project, want)
    assert {s["context"]["span_id"] for s in spans} == want  # nothing more than the ledger names

    by_id = {s["context"]["span_id"]: s for s in spans}
    roots = [s for s in spans if s["name"] == names.SPAN_STOP]
    assert len(roots) == stops_in(ledger) > 0
    assert len({r["context"]["trace_id"] for r in roots}) == len(roots)  # one trace per stop

    def stop_of(span: dict[str, Any]) -> dict[str, Any] | None:
        while span["name"] != names.SPAN_STOP:
            parent = by_id.get(span["parent_id"] or "")
            if parent is None:
                return None
            assert parent["context"]["trace_id"] == span["context"]["trace_id"]
            span = parent
        return span

    stop_path = {
        names.SPAN_AGENT_ABORT,
        names.SPAN_ABORT_WALK,
        names.SPAN_TOOLS_ABORT,
        names.SPAN_TURN_SETTLE,
    }
    for span in spans:
        if span["name"] in stop_path:
            assert stop_of(span) is not None, span

    children = Counter(
        s["parent_id"] for s in spans if s["name"] == names.SPAN_TOOLS_ABORT and s["parent_id"]
    )
    walks = [s for s in spans if s["name"] == names.SPAN_ABORT_WALK]
    assert walks
    for walk in walks:
        inflight = walk["attributes"][names.A_WALK_INFLIGHT]
        assert children[walk["context"]["span_id"]] == inflight, walk

    for span in spans:  # an error says why; an abort is not an error
        assert (span["status_code"] == "ERROR") == (names.A_ERROR_TYPE in span["attributes"])


def test_a_file_ingested_twice_sends_its_spans_once(phoenix: Phoenix, tmp_path: Path) -> None:
    # A foreign runtime's events: the demo's, as JSON lines without the demo's span ids.
    demo = tmp_path / "demo.sqlite3"
    exported(
        {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "demo",
        "--json",
        "--ledger",
        str(demo),
    )
    conn = connect(demo, readonly=True)
    events = [
        {k: v for k, v in ev.to_json().items() if k not in ("trace_id", "span_id")}
        for _seq, ev in read_events(conn)
    ]
    conn.close()
    lines = tmp_path / "events.jsonl"
    lines.write_text("".join(json.dumps(e) + "\n" for e in events))

    project = "turnwatch-ingest"
    env = otlp_env(phoenix, "http/protobuf", project)
    ledger = tmp_path / "ledger.sqlite3"
    exported(env, "ingest", str(lines), "--ledger", str(ledger))
    first = ledger_span_ids(ledger)
    assert len(arrived(phoenix, project, first)) == len(first)

    again = exported(env, "ingest", str(lines), "--ledger", str(ledger))
    assert "ingested 0 new event(s)" in again.stderr

    # A later stop, sent after the second ingest: once its spans are in, anything the second
    # ingest had sent would be in too.
    later = tmp_path / "later.jsonl"
    t = events[-1]["ts"] + 10
    stop: list[tuple[str, dict[str, Any]]] = [
        (names.TURN_STARTED, {"turn": "later.t1"}),
        (names.ABORT_RPC_RECEIVED, {"turn": "later.t1"}),
        (names.ABORT_WALK_STARTED, {"turn": "later.t1", "attrs": {"inflight": 0}}),
        (names.TURN_SETTLED, {"turn": "later.t1", "attrs": {"outcome": "aborted"}}),
        (names.ABORT_RPC_RETURNED, {"turn": "later.t1", "attrs": {"receipt": "ok"}}),
        (names.PROCESSING_CLEARED, {"turn": "later.t1"}),
    ]
    later.write_text(
        "".join(
            json.dumps({"ts": t + i / 10, "kind": kind, "session": "later", **extra}) + "\n"
            for i, (kind, extra) in enumerate(stop)
        )
    )
    exported(env, "ingest", str(later), "--ledger", str(ledger))
    everything = ledger_span_ids(ledger)
    assert everything > first
    spans = arrived(phoenix, project, everything)
    assert len(spans) == len(everything)
    assert Counter(s["name"] for s in spans)[names.SPAN_STOP] == stops_in(ledger)
