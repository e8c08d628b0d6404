"""One reading of the stop path: every consumer of the same stream tells the same story.

Spans, metrics, the ledger's rows (``sessions``), ``explain`` and the invariant checker are fed
the same streams — a real runtime's stop, and foreign streams with the edge cases the consumers
used to read differently — and must agree on where each stop began, which calls it reached, and
how each call ended.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from prometheus_client import CollectorRegistry

from tests import streams
from tests.conftest import GRACE, until
from turnwatch import names
from turnwatch.cli import waterfall
from turnwatch.exporters.metrics import StopMetrics
from turnwatch.runtime import LocalHost, MemorySink, Runtime
from turnwatch.runtime.events import Event
from turnwatch.runtime.fold import Fold, Move, Store
from turnwatch.testing import check_invariants
from turnwatch.tracing import view
from turnwatch.tracing.ingest import parse_line
from turnwatch.tracing.ledger import Ledger, connect
from turnwatch.tracing.spans import SpanBuilder


class Spans(SpanProcessor):
    """Every span started and ended, by name (an unended stop root still counts as begun)."""

    def __init__(self) -> None:
        self.started: Counter[str] = Counter()
        self.ended: list[ReadableSpan] = []

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.started[span.name] += 1

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.ended if s.name == name]


def ev(ts: float, kind: str, session: str = "f", **kw: Any) -> Event:
    return Event(kind, session, ts, None, kw.pop("turn", "t1"), attrs=kw.pop("attrs", {}), **kw)


def foreign_edge_cases(t: float) -> list[Event]:
    """What the consumers used to read differently, in one stream."""
    return [
        ev(t, names.RUNTIME_STARTED, turn=None, attrs={"mode": "adr"}),
        ev(t, names.TURN_STARTED),
        ev(t + 0.1, names.TOOL_REQUESTED, call="g", tool="Grep"),
        ev(t + 0.1, names.TOOL_STARTED, call="g", tool="Grep"),
        ev(t + 0.1, names.TOOL_REQUESTED, call="b", tool="Bash"),
        ev(t + 0.1, names.TOOL_STARTED, call="b", tool="Bash"),
        # A join of a stop that never began here: it starts no stop anywhere.
        ev(t + 1.0, names.ABORT_RPC_RECEIVED, attrs={"source": "api", "receipt": "joined"}),
        ev(t + 1.0, names.ABORT_RPC_RETURNED, attrs={"receipt": "joined"}),
        ev(t + 2.0, names.STOP_CLICKED, attrs={"source": "ui"}),
        ev(t + 2.1, names.ABORT_RPC_RECEIVED, attrs={"source": "ui"}),
        ev(t + 2.2, names.ABORT_WALK_STARTED, attrs={"inflight": 2}),
        ev(t + 2.2, names.TOOLS_ABORT_SENT, call="g", tool="Grep"),
        ev(t + 2.2, names.TOOLS_ABORT_SENT, call="b", tool="Bash"),
        # Released without an outcome: each kind's own.
        ev(t + 2.3, names.TOOL_RESULT_DISCARDED, call="g", tool="Grep"),
        ev(t + 2.9, names.TOOL_FINISHED, call="b", tool="Bash"),
        # Requested after the stop: refused, never started.
        ev(t + 3.0, names.TOOL_REQUESTED, call="r", tool="Read"),
        ev(t + 3.0, names.TOOL_REFUSED, call="r", tool="Read"),
        ev(t + 3.1, names.TURN_SETTLED, attrs={"outcome": "aborted"}),
        ev(t + 3.2, names.ABORT_RPC_RETURNED, attrs={"receipt": "accepted"}),
        ev(t + 3.2, names.PROCESSING_CLEARED),
        # The raced Grep's late answer: not a second release.
        ev(t + 9.0, names.TOOL_FINISHED, call="g", tool="Grep", attrs={"outcome": "completed"}),
    ]


async def real_stop(tmp_path: Path, fifo: Path) -> list[Event]:
    """A real runtime's stop with a call of each class and a prompt it closes."""
    sink = MemorySink()
    host = LocalHost()
    runtime = Runtime(
        host, grace_s=GRACE, sink=sink, ask_permission=lambda tool, _cls: tool == "Edit"
    )
    turn = runtime.start_turn("real")
    turn.request("Grep", {"pattern": "x", "path": str(fifo)})
    turn.request("Bash", {"command": "sleep 300"})
    turn.request("Edit", {"path": str(tmp_path / "w"), "old": "x", "new": "y"})
    await until(lambda: len(sink.of(names.TOOL_STARTED)) == 2, what="two calls started")
    await until(lambda: sink.of(names.PERMISSION_REQUESTED), what="the Edit prompt")
    await runtime.abort("real", clicked_at=time.time() - 0.05)
    await runtime.abort("real")  # a second stop: joins, starts nothing
    await asyncio.sleep(0)
    return list(sink.events)


def four_states() -> list[Event]:
    out = []
    for i, raw in enumerate(streams.four_states(), 1):
        parsed = parse_line(raw.encode(), i)
        assert isinstance(parsed, Event)
        out.append(parsed)
    return out


def read_all(events: Iterable[Event], path: Path) -> dict[str, Any]:
    """Every consumer's reading of ``events``."""
    events = list(events)
    procs = Spans()
    provider = TracerProvider()
    provider.add_span_processor(procs)
    spans = SpanBuilder(provider.get_tracer("agree"))
    registry = CollectorRegistry()
    metrics = StopMetrics(registry)
    ledger = Ledger(path)
    for e in events:
        stamped = spans(e)
        metrics(stamped)
        ledger.append(stamped)
    ledger.close()
    conn = connect(path, readonly=True)
    rows = view.sessions(conn)
    explained = [
        waterfall.build(conn, r.session, r.turn) for r in rows if r.turn is not None and r.stop_ts
    ]
    conn.close()
    return {
        "spans": procs,
        "registry": registry,
        "rows": rows,
        "explained": explained,
        "violations": check_invariants(events),
    }


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    total = 0.0
    for metric in registry.collect():
        for s in metric.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def assert_agree(r: dict[str, Any]) -> None:
    spans: Spans = r["spans"]
    reg: CollectorRegistry = r["registry"]
    rows: list[view.SessionView] = r["rows"]
    stopped = [row for row in rows if row.stop_ts is not None]
    # Where stops begin: spans, metrics, the ledger and explain count the same stops.
    assert spans.started[names.SPAN_STOP] == len(stopped)
    assert value(reg, names.M_STOPS + "_total") == len(stopped)
    assert [e.stop_at for e in r["explained"]] == [row.stop_ts for row in stopped]
    # Settled and cleared stops: one histogram sample, one ended span, one ledger timestamp.
    settled = [row for row in stopped if row.settled_ts is not None]
    assert value(reg, names.M_STOP_TO_SETTLE + "_count") == len(settled)
    assert len(spans.named(names.SPAN_TURN_SETTLE)) == len(settled)
    idle = [row for row in stopped if not row.processing]
    assert value(reg, names.M_STOP_TO_IDLE + "_count") == len(idle)
    assert len(spans.named(names.SPAN_STOP)) == len(idle)
    # How each call ended: the execute_tool span, the ledger row and explain say the same.
    ledger_outcomes = {
        (row.session, c.call): c.outcome for row in rows for c in row.calls if c.outcome
    }
    span_outcomes = {
        (str(a[names.A_GENAI_CONVERSATION]), str(a[names.A_GENAI_TOOL_CALL_ID])): a[names.A_OUTCOME]
        for s in spans.ended
        if s.name.startswith(names.SPAN_EXECUTE_TOOL_PREFIX)
        for a in [s.attributes or {}]
    }
    for key, outcome in span_outcomes.items():
        assert ledger_outcomes[key] == outcome, key
    explained = {(e.session, t.call): t.outcome for e in r["explained"] for t in e.tools}
    for key, outcome in explained.items():
        assert ledger_outcomes.get(key, "running") == outcome, key
    # What the stop reached: one histogram sample per tools.abort a host was sent (a call closed
    # before it started has its span, marked, and no abort to time).
    sent = [
        s
        for s in spans.named(names.SPAN_TOOLS_ABORT)
        if not (s.attributes or {}).get(names.A_BEFORE_START)
    ]
    assert value(reg, names.M_TOOL_ABORT + "_count") == len(sent)


async def test_every_consumer_reads_a_real_stop_alike(tmp_path: Path, fifo: Path) -> None:
    events = await real_stop(tmp_path, fifo)
    r = read_all(events, tmp_path / "real.sqlite3")
    assert_agree(r)
    assert r["violations"] == []
    # Every call in flight at the walk has its tools.abort: the Grep, the Bash, and the Edit
    # closed at its prompt (marked: it never began).
    walk = r["spans"].named(names.SPAN_ABORT_WALK)[0]
    aborts = r["spans"].named(names.SPAN_TOOLS_ABORT)
    assert len(aborts) == (walk.attributes or {})[names.A_WALK_INFLIGHT] == 3
    assert [(s.attributes or {}).get(names.A_BEFORE_START) for s in aborts].count(True) == 1
    (ex,) = r["explained"]
    assert [label for _o, label, _d in ex.steps][:2] == ["Stop clicked", "agent.abort received"]
    assert {t.tool: t.outcome for t in ex.tools} == {
        "Grep": "discarded",
        "Bash": "aborted",
        "Edit": "aborted",
    }


def test_every_consumer_reads_the_edge_cases_alike(tmp_path: Path) -> None:
    r = read_all(foreign_edge_cases(time.time() - 60), tmp_path / "edge.sqlite3")
    assert_agree(r)
    (row,) = r["rows"]
    # The joined RPC at +1 s began nothing: the stop is the click at +2 s.
    assert row.stop_ts == pytest.approx(time.time() - 58, abs=1)
    outcomes = {c.call: c.outcome for c in row.calls}
    assert outcomes == {"g": "discarded", "b": "completed", "r": "refused"}
    (ex,) = r["explained"]
    assert {t.call: t.outcome for t in ex.tools} == outcomes
    assert value(r["registry"], names.M_RESULTS_DISCARDED + "_total", tool="Grep") == 1


def test_every_consumer_reads_the_four_states_alike(tmp_path: Path) -> None:
    r = read_all(four_states(), tmp_path / "four.sqlite3")
    assert_agree(r)
    states = {row.session: row.state for row in r["rows"]}
    assert states == {
        "idle": names.STATE_IDLE,
        "busy": names.STATE_PROCESSING,
        "stopping": names.STATE_STOPPING,
        "pinned": names.STATE_PINNED,
    }


def test_a_call_that_names_another_tool_moves_nothing_and_is_reported() -> None:
    t = time.time()
    fold = Fold()
    fold(ev(t, names.TOOL_REQUESTED, call="c", tool="Bash"))
    st = fold(ev(t, names.TOOL_FINISHED, call="c", tool="Write", attrs={"outcome": "completed"}))
    assert st.moves == (Move.CROSSED,)
    assert not fold.calls[("f", "c")].released
    violations = check_invariants(
        [
            ev(t, names.TOOL_REQUESTED, call="c", tool="Bash"),
            ev(t, names.TOOL_FINISHED, call="c", tool="Write"),
        ]
    )
    assert [v.invariant for v in violations] == [4]


def test_a_long_running_reader_keeps_a_bounded_number_of_released_calls() -> None:
    fold = Fold(Store(max_released=3))
    t = time.time()
    for i in range(10):
        fold(ev(t, names.TOOL_REQUESTED, call=f"c{i}", tool="Read"))
        fold(ev(t, names.TOOL_FINISHED, call=f"c{i}", tool="Read"))
    assert sorted(c for _s, c in fold.calls) == ["c7", "c8", "c9"]
    fold(ev(t, names.TOOL_REQUESTED, call="open", tool="Bash"))
    assert ("f", "open") in fold.calls  # calls still held are never forgotten


def test_a_long_running_reader_keeps_a_bounded_number_of_idle_sessions() -> None:
    """Memory bounded by what is live, not by history: past the bound the sessions idle longest
    are forgotten; a session still processing never is, nor one busy again since."""
    fold = Fold(Store(max_released=3, max_idle=3))
    t = time.time()
    fold(ev(t, names.RUNTIME_STARTED, "busy", turn=None, attrs={"mode": "adr"}))
    fold(ev(t, names.TURN_STARTED, "busy"))
    for i in range(6):
        s = f"s{i}"
        fold(ev(t, names.RUNTIME_STARTED, s, turn=None, attrs={"mode": "adr"}))
        fold(ev(t, names.TURN_STARTED, s))
        fold(ev(t, names.TURN_SETTLED, s, attrs={"outcome": "completed"}))
        fold(ev(t, names.PROCESSING_CLEARED, s))
        if i == 1:  # s0 is busy again: kept, and counted once idle again
            fold(ev(t, names.TURN_STARTED, "s0", turn="t2"))
    assert sorted(fold.sessions) == ["busy", "s0", "s3", "s4", "s5"]
    fold(ev(t, names.PROCESSING_CLEARED, "s0", turn="t2"))
    assert sorted(fold.sessions) == ["busy", "s0", "s4", "s5"]
    # A forgotten session's next event reads as its first: its mode is no longer known.
    assert fold(ev(t + 1, names.TURN_STARTED, "s1", turn="t2")).session.mode is None
    assert fold.sessions["s5"].mode == "adr"  # one kept keeps what it knew
    # Sessions no turn ever made busy (a finding, a late event of a forgotten one) are idle
    # from their first event: bounded too.
    for i in range(6):
        fold(ev(t, names.WATCHDOG_FINDING, f"stray{i}", attrs={"finding": "pinned_session"}))
    assert sorted(fold.sessions) == ["busy", "s1", "stray3", "stray4", "stray5"]


def test_serve_metrics_memory_does_not_grow_with_the_sessions_it_has_seen() -> None:
    """``serve-metrics`` folds the whole ledger into its metrics, for months: 12,000 more idle
    sessions past the bound cost it nothing more (they cost ~300 bytes each before)."""
    import tracemalloc

    metrics = StopMetrics(CollectorRegistry())
    t = time.time()

    def sessions(first: int, n: int) -> None:
        for i in range(first, first + n):
            s = f"session-{i}"
            metrics.observe(ev(t, names.TURN_STARTED, s))
            metrics.observe(ev(t, names.TOOL_REQUESTED, s, call="c", tool="Grep"))
            metrics.observe(ev(t, names.TOOL_STARTED, s, call="c", tool="Grep"))
            metrics.observe(ev(t, names.TOOL_FINISHED, s, call="c", tool="Grep"))
            metrics.observe(ev(t, names.TURN_SETTLED, s, attrs={"outcome": "completed"}))
            metrics.observe(ev(t, names.PROCESSING_CLEARED, s))

    tracemalloc.start()
    try:
        sessions(0, 11_000)  # past the bound a reader keeps (10,000 idle sessions)
        before, _ = tracemalloc.get_traced_memory()
        sessions(11_000, 12_000)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 500_000, after - before


def test_the_rules_are_written_once() -> None:
    """No consumer of the stream dispatches on event kinds of the stop path any more."""
    src = Path(__file__).resolve().parents[2] / "src" / "turnwatch"
    consumers = [
        src / "tracing" / "spans.py",
        src / "exporters" / "metrics.py",
        src / "tracing" / "summary.py",
        src / "cli" / "waterfall.py",
        src / "testing.py",
    ]
    consts = {k for k, v in vars(names).items() if isinstance(v, str) and v in names.EVENT_KINDS}
    for path in consumers:
        text = path.read_text()
        used = sorted(c for c in consts if f"names.{c}" in text)
        # spans.py names its root's span events after the kinds; that is all.
        assert set(used) <= {"PROCESSING_CLEARED", "STOP_CLICKED"}, (path.name, used)


# --- the browser's ends of a stop (its clock, posted to /v1/events) ---
