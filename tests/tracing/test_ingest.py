"""Foreign runtime events: validation, line numbers, nothing good lost, idempotent re-ingest."""

from __future__ import annotations

import functools
import importlib
import io
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import fastjsonschema
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.streams import four_states, line, write
from turnwatch import names
from turnwatch.cli.app import app
from turnwatch.runtime import MemorySink
from turnwatch.runtime.events import Event
from turnwatch.tracing.ingest import (
    MAX_LINE_BYTES,
    BadLine,
    ingest,
    parse_line,
    schema,
    validator,
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

    good = parse_line(finished('{"lingering": [[42, 1.5]], "containment": "cgroup"}'), 1)
    assert not isinstance(good, BadLine)
    assert good is not None
    assert good.attrs["lingering"] == [[42, 1.5]]
    for attrs, why in (
        ('{"lingering": [["x", 1.5]]}', "lingering[0][0] must be integer"),
        ('{"lingering": [[42]]}', "lingering[0] must contain at least 2 items"),
        ('{"containment": "jail"}', "containment must be one of"),
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


_KINDS = [*names.EVENT_KINDS, "tool.teleported"]
_IDS = st.one_of(st.none(), st.sampled_from(["", "t", "c", "x" * 300]), st.integers())
_ATTRS = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "outcome": st.sampled_from(["completed", "aborted", "failed", "exploded", 3]),
            "pid": st.sampled_from([0, 1, 4242, "9"]),
            "create_time": st.sampled_from([0.0, 12.5, -1, "now"]),
            "class": st.sampled_from(["read_only", "extension", "teleport"]),
        },
    ),
)


#: Values at the edges of what the schema allows, for every key (JSON's own types only).
_EDGES: list[object] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2,
    1.5,
    -0.5,
    10**20,
    "",
    "a",
    "x" * 256,
    "x" * 257,
    "0" * 32,
    "0" * 31 + "\n",
    "a" * 16,
    [],
    ["a"],
    [1],
    [[1, 0.5]],
    [[0, 1]],
    {},
    {"a": 1},
    "read_only",
    "process",
    "cgroup",
    "process_group",
    "completed",
    "exploded",
    "codex",
]
_ANY = st.sampled_from(_EDGES)
_WIDE_ATTRS = st.dictionaries(
    st.sampled_from(
        [
            "pid",
            "create_time",
            "class",
            "outcome",
            "mode",
            "control",
            "containment",
            "holes",
            "cgroup",
            "lingering",
            "source",
            "other",
        ]
    ),
    _ANY,
    max_size=3,
)
_FIELD_VALUES = st.one_of(_ANY, st.integers(-(10**20), 10**20), st.floats(-2e9, 2e9))
_FIELDS = st.dictionaries(
    st.sampled_from(
        ["ts", "kind", "session", "turn", "call", "tool", "mono_ns", "trace_id", "span_id", "x"]
    ),
    _FIELD_VALUES,
    max_size=2,
)


@settings(max_examples=2000, deadline=None)
# Each condition of the hand check, at its edge, in every run (found by mutating _fits).
@example(kind="tool.started", fields={"session": ""}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"turn": "x" * 257}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"ts": -1}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"ts": 100_000_000_001}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"mono_ns": True}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"mono_ns": 2**63}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"mono_ns": -(2**63) - 1}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"mono_ns": 2**63 - 1}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"trace_id": "0" * 31 + "\n"}, drop=set(), attrs=None)
@example(kind="tool.started", fields={"x": 1}, drop=set(), attrs=None)
@example(kind="tool.started", fields={}, drop=set(), attrs={"pid": 0})
@example(kind="tool.started", fields={}, drop=set(), attrs={"pid": 2**31})
@example(kind="tool.started", fields={}, drop=set(), attrs={"pid": 2**31 - 1})
@example(kind="tool.started", fields={}, drop=set(), attrs={"create_time": -0.5})
@example(kind="tool.started", fields={}, drop=set(), attrs={"cgroup": ""})
@example(kind="tool.started", fields={}, drop=set(), attrs={"class": "teleport"})
@example(kind="tool.started", fields={}, drop=set(), attrs={"mode": 1})
@example(kind="tool.started", fields={}, drop=set(), attrs={"lingering": [[0, 1]]})
@example(kind="tool.started", fields={}, drop={"call"}, attrs=None)
@given(
    kind=st.sampled_from(sorted(names.EVENT_KINDS)),
    fields=_FIELDS,
    drop=st.sets(st.sampled_from(["session", "turn", "call", "tool", "attrs"]), max_size=1),
    attrs=st.one_of(st.none(), _WIDE_ATTRS, _ANY),
)
def test_the_short_way_never_accepts_what_the_schema_refuses(
    kind: str, fields: dict[str, object], drop: set[str], attrs: object
) -> None:
    """The hand check of the common shapes (``_fits``, with the per-kind ``required`` as a set
    test) gives the plain schema's verdict, and its words: on a good line of each kind with
    one or two of its fields changed, one dropped, or its attrs changed or replaced."""
    obj: dict[str, object] = {
        "ts": 1.5e9,
        "kind": kind,
        "session": "s",
        "turn": "t",
        "call": "c",
        "tool": "Grep",
        "attrs": {"outcome": "completed", "pid": 4, "create_time": 1.0},
    }
    obj.update(fields)
    for key in drop:
        obj.pop(key, None)
    if isinstance(attrs, dict) and isinstance(obj.get("attrs"), dict):
        obj["attrs"] = {**obj["attrs"], **attrs}  # type: ignore[dict-item]
    elif attrs is not None:
        obj["attrs"] = attrs
    verdicts = []
    for validate in (_plain(), validator()):
        try:
            validate(obj)
            verdicts.append("ok")
        except fastjsonschema.JsonSchemaValueException as exc:
            verdicts.append(exc.message)
    assert verdicts[0] == verdicts[1], obj


def test_the_short_way_is_taken_for_the_shipped_schema() -> None:
    """``_fits`` was written for this schema: a change to it must be read into ``_fits`` (and
    its digest updated), or lines would take the long way unseen."""
    module = importlib.import_module(
        "turnwatch.tracing.ingest"
    )  # the package's `ingest`: a function
    base = {k: v for k, v in schema().items() if k != "allOf"}
    assert module._digest(base) == module._FITS_SCHEMA  # noqa: SLF001 - the guard itself
    shape = module._Shape.of(base)  # noqa: SLF001
    line = {
        "ts": 1.0,
        "kind": "tool.started",
        "session": "s",
        "turn": "t",
        "call": "c",
        "tool": "Grep",
        "attrs": {"pid": 7, "create_time": 2.5, "class": "process"},
    }
    assert module._fits(line, shape)  # noqa: SLF001


@functools.cache
def _plain() -> Callable[[object], object]:
    """The whole schema compiled as it is, with its if/then rules tried one by one."""
    return fastjsonschema.compile(schema())


@settings(max_examples=400, deadline=None)
@given(
    kind=st.sampled_from(_KINDS),
    ts=st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=3)),
    turn=_IDS,
    call=_IDS,
    tool=_IDS,
    attrs=_ATTRS,
)
def test_kind_dispatch_gives_the_plain_schema_verdicts(
    kind: str, ts: object, turn: object, call: object, tool: object, attrs: object
) -> None:
    """The fast validator (per-kind rules looked up) judges every line as the schema does."""
    obj: dict[str, object] = {"ts": ts, "kind": kind, "session": "s"}
    for key, value in (("turn", turn), ("call", call), ("tool", tool), ("attrs", attrs)):
        if value is not None:
            obj[key] = value
    verdicts = []
    for validate in (_plain(), validator()):
        try:
            validate(obj)
            verdicts.append("ok")
        except fastjsonschema.JsonSchemaValueException as exc:
            verdicts.append(exc.message)
    assert verdicts[0] == verdicts[1]


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
