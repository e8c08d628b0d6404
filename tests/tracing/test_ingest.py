"""Foreign runtime events: validation, line numbers, nothing good lost, idempotent re-ingest."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

from typer.testing import CliRunner

from tests.streams import four_states, line, write
from turnwatch.cli.app import app
from turnwatch.runtime import MemorySink
from turnwatch.runtime.events import Event
from turnwatch.tracing.ingest import (
    MAX_LINE_BYTES,
    BadLine,
    ingest,
    parse_line,
)
from turnwatch.tracing.ledger import Ledger, connect, dedup_key
from turnwatch.tracing.tail import Tail

runner = CliRunner()

GOOD = line(1.0, "turn.started", "s", turn="t")


def test_each_bad_line_is_reported_by_number_and_the_rest_kept(tmp_path: Path) -> None:
    lines = [
        GOOD,  # 1 good
        "{not json",  # 2
        json.dumps({"kind": "turn.started", "session": "s", "turn": "t"}),  # 3 missing ts
        json.dumps({"ts": "yesterday", "kind": "turn.started", "session": "s", "turn": "t"}),  # 4
        line(2.0, "tool.teleported", "s"),  # 5 unknown kind
        line(3.0, "tool.started", "s", turn="t"),  # 6 no call/tool
        "",  # 7 blank: skipped
        line(4.0, "turn.settled", "s", turn="t", attrs={"outcome": "completed"}),  # 8 good
        '{"ts": 1, "kind": "turn.started", "session": "s", "x": "' + "y" * MAX_LINE_BYTES + '"}',
        line(5.0, "processing.cleared", "s", turn="t"),  # 10 good
    ]
    src = write(tmp_path / "events.jsonl", lines)
    db = tmp_path / "ledger.sqlite3"
    result = runner.invoke(app, ["ingest", str(src), "--ledger", str(db)])
    assert result.exit_code == 2
    for n, why in [
        (2, "not JSON"),
        (3, "data must contain ['ts'] properties"),
        (4, "data.ts must be number"),
        (5, "unknown event kind 'tool.teleported'; did you mean tool.started"),
        (6, "data must contain ['call', 'tool'] properties"),
        (9, "over the 1048576 limit"),
    ]:
        assert f"events.jsonl:{n}: " in result.stderr
        assert why in result.stderr
    assert "ingested 3 new event(s)" in result.stderr
    conn = connect(db, readonly=True)
    kinds = [r[0] for r in conn.execute("SELECT kind FROM events ORDER BY seq")]
    assert kinds == ["turn.started", "turn.settled", "processing.cleared"]


def test_a_time_in_milliseconds_is_a_bad_line_that_says_so() -> None:
    """Taken as seconds, a runtime writing milliseconds put its sessions 50,000 years ahead:
    "0 s ago" in ``sessions`` forever, and never found pinned by the watchdog."""
    now_ms = int(time.time() * 1000)
    bad = parse_line(line(now_ms, "turn.started", "s", turn="t").encode(), 3)
    assert isinstance(bad, BadLine)
    assert bad.reason == f"ts {now_ms} is not unix seconds: after the year 5138 (milliseconds?)"
    for edge in (100_000_000_000, 1e11, time.time()):
        assert isinstance(parse_line(line(edge, "turn.started", "s", turn="t").encode(), 1), Event)
    stream = io.BytesIO(b"\n".join([GOOD.encode(), line(now_ms, "turn.started", "s").encode()]))
    report = ingest(stream, MemorySink())
    assert (report.good, [b.lineno for b in report.bad]) == (1, [2])


def test_numbers_beyond_what_the_ledger_keeps_are_bad_lines() -> None:
    """A ``mono_ns`` past 64 bits (the ledger's INTEGER) or a pid past a ``pid_t``: refused by
    number, with the field named. One beside a NUL in an id stopped the ledger's writer, and
    every line after it was lost while ``ingest`` said they were there."""
    for fields, where in (
        ({"mono_ns": 10**20}, "data.mono_ns must be smaller than or equal to"),
        ({"attrs": {"pid": 10**30, "create_time": 1.0}}, "data.attrs.pid must be smaller"),
    ):
        raw = line(1e9, "tool.started", "s\x00", turn="t", call="c", tool="Bash", **fields)
        bad = parse_line(raw.encode(), 7)
        assert isinstance(bad, BadLine), fields
        assert bad.reason.startswith(where), bad.reason


def test_a_ten_megabyte_line_is_rejected_without_losing_neighbours() -> None:
    big = b'{"ts": 1, "kind": "turn.started", "session": "' + b"s" * 10_000_000 + b'"}\n'
    stream = io.BytesIO(GOOD.encode() + b"\n" + big + GOOD.encode() + b"\n")
    sink = MemorySink()
    report = ingest(stream, sink)
    assert report.good == 2
    assert [b.lineno for b in report.bad] == [2]


def test_process_attributes_are_checked_like_the_rest() -> None:
    def finished(attrs: str) -> bytes:
        return (
            b'{"ts": 1, "kind": "tool.finished", "session": "s", "turn": "t", "call": "c", '
            b'"tool": "Bash", "attrs": ' + attrs.encode() + b"}"
        )

    kernel = '"start_ticks": 7, "boot_id": "b"'
    good = parse_line(
        finished('{"lingering": [[42, 1.5]], "containment": "cgroup", ' + kernel + "}"), 1
    )
    assert not isinstance(good, BadLine)
    assert good is not None
    assert good.attrs["lingering"] == [[42, 1.5]]
    for attrs, why in (
        ('{"lingering": [["x", 1.5]]}', "lingering[0][0] must be integer"),
        ('{"lingering": [[42]]}', "lingering[0] must contain at least 2 items"),
        ('{"containment": "jail"}', "containment must be one of"),
        ('{"lingering": [[42, 1.5, 7, 8]]}', "lingering[0] must contain less than or equal to 3"),
        ('{"lingering": [[42, 1.5, -7]]}', "lingering[0][2] must be bigger than or equal to 0"),
        ('{"start_ticks": 1.5}', "start_ticks must be integer"),
        ('{"boot_id": ""}', "boot_id must be longer than or equal to 1"),
    ):
        bad = parse_line(finished(attrs), 7)
        assert isinstance(bad, BadLine), attrs
        assert why in bad.reason, bad.reason


def test_reingesting_the_same_file_adds_nothing(tmp_path: Path) -> None:
    src = write(tmp_path / "events.jsonl", four_states())
    db = tmp_path / "ledger.sqlite3"
    assert runner.invoke(app, ["ingest", str(src), "--ledger", str(db)]).exit_code == 0
    conn = connect(db, readonly=True)
    first = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    assert runner.invoke(app, ["ingest", str(src), "--ledger", str(db)]).exit_code == 0
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == first == len(four_states())


def test_follow_reads_a_growing_file(tmp_path: Path) -> None:
    path = tmp_path / "grow.jsonl"
    path.write_text(GOOD + "\n")
    sink = MemorySink()
    done = threading.Event()

    def grow() -> None:
        with path.open("a") as fh:
            fh.write(line(2.0, "turn.settled", "s", turn="t", attrs={"outcome": "aborted"})[:20])
            fh.flush()
            time.sleep(0.1)  # half a line on disk: the reader must wait for the rest
            fh.write(
                line(2.0, "turn.settled", "s", turn="t", attrs={"outcome": "aborted"})[20:] + "\n"
            )
        while len(sink) < 2:
            time.sleep(0.01)
        done.set()

    t = threading.Thread(target=grow)
    t.start()
    with Tail(path, follow=True, poll_s=0.01, stop=done.is_set) as tail:
        report = ingest(tail, sink)
    t.join()
    assert report.good == 2
    assert report.bad == []


def test_unreadable_source_and_ledger_are_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["ingest", str(tmp_path / "missing.jsonl")])
    assert result.exit_code == 2
    assert "missing.jsonl: cannot read" in result.stderr
    bad = tmp_path / "bad.sqlite3"
    bad.write_bytes(b"garbage" * 1000)
    src = write(tmp_path / "e.jsonl", [GOOD])
    result = runner.invoke(app, ["ingest", str(src), "--ledger", str(bad)])
    assert result.exit_code == 2
    assert "bad.sqlite3: unreadable ledger" in result.stderr


def test_parse_line_builds_the_event() -> None:
    ev = parse_line(
        line(
            1.5,
            "tool.started",
            "s",
            turn="t",
            call="c",
            tool="Bash",
            attrs={"pid": 42, "create_time": 1.0},
        ).encode(),
        1,
    )
    assert not isinstance(ev, type(None))
    assert getattr(ev, "attrs", None) == {"pid": 42, "create_time": 1.0}


def test_ingesting_the_same_lines_twice_builds_their_spans_once(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from turnwatch.tracing.ledger import Ledger
    from turnwatch.tracing.pipeline import Telemetry
    from turnwatch.tracing.spans import SpanBuilder

    call = {"turn": "t", "call": "c", "tool": "Grep"}
    stop = [  # one whole stop, from the click to idle
        line(1.0, "turn.started", "s", turn="t"),
        line(1.1, "tool.requested", "s", **call),
        line(1.1, "tool.started", "s", **call),
        line(2.0, "stop.clicked", "s", turn="t", attrs={"source": "ui"}),
        line(2.0, "abort.rpc.received", "s", turn="t", attrs={"receipt": "accepted"}),
        line(2.0, "abort.walk.started", "s", turn="t", attrs={"inflight": 1}),
        line(2.0, "tools.abort.sent", "s", **call),
        line(2.0, "tool.result.discarded", "s", **call, attrs={"outcome": "discarded"}),
        line(2.1, "turn.settled", "s", turn="t", attrs={"outcome": "aborted"}),
        line(2.1, "abort.rpc.returned", "s", turn="t", attrs={"receipt": "accepted"}),
        line(2.1, "processing.cleared", "s", turn="t"),
    ]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    src = write(tmp_path / "e.jsonl", stop)
    for _ in range(2):
        ledger = Ledger(tmp_path / "ledger.sqlite3")
        tel = Telemetry(ledger=ledger, spans=SpanBuilder(provider.get_tracer("t")), dedup=True)
        with src.open("rb") as f:
            ingest(f, tel)
        ledger.close()
    names_sent = sorted(s.name for s in exporter.get_finished_spans())
    assert names_sent == sorted(
        ["stop", "agent.abort", "abort.walk", "turn.settle", "tools.abort", "execute_tool Grep"]
    )
    conn = connect(tmp_path / "ledger.sqlite3", readonly=True)
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == len(stop)
    conn.close()


def test_keys_follow_time_and_a_ledger_keyed_before_still_keeps_each_line_once(
    tmp_path: Path,
) -> None:
    """Dedup keys lead with the event's time, so a time-ordered file's keys append at the end
    of their index instead of dirtying a random page of it per line (a 2,000-line batch wrote
    about 6 MB of WAL). A ledger whose keys were written before (the bare hash) still knows
    those lines: ingesting them again adds nothing."""
    from turnwatch.tracing import dedup

    evs = [Event("tool.progress", "s", 1e9 + i, turn="t", call="c", tool="Grep") for i in range(3)]
    keys = [dedup_key(e) for e in evs]
    assert keys == sorted(keys)  # time-ordered
    path = tmp_path / "ledger.sqlite3"
    conn = connect(path)
    # What an earlier turnwatch kept of the first two: their keys as bare hashes.
    old = [(dedup.legacy_key(k),) for k in keys[:2]]
    conn.executemany("INSERT INTO ingested VALUES (?)", old)
    conn.execute("DELETE FROM meta WHERE key = 'dedup_keys'")  # nor did it say how it keyed
    conn.close()
    ledger = Ledger(path)  # a writer opening it learns that old keys are there
    ledger.extend(evs, dedup=True)
    ledger.close()
    assert ledger.written == 1  # the third only
    ledger = Ledger(path)
    ledger.extend(evs, dedup=True)
    ledger.close()
    assert ledger.written == 0
