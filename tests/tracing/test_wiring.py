"""One way to wire the readers, and one fold per event: ``Telemetry`` attaches the span builder and
the metrics to the ledger, whose writer folds each event once (for its summary rows) and hands
them that step; nothing keeps a fold of its own beside it."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from tests.conftest import GRACE, release_fifo, until
from turnwatch import names
from turnwatch.exporters.metrics import StopMetrics
from turnwatch.runtime import LocalHost, MemorySink, Phase, Receipt, Runtime
from turnwatch.runtime.events import Event
from turnwatch.runtime.fold import Fold, Step
from turnwatch.tracing.ledger import Ledger, connect, read_events
from turnwatch.tracing.pipeline import Telemetry
from turnwatch.tracing.spans import SpanBuilder
from turnwatch.tracing.stages import Stages


async def test_the_writer_folds_each_event_once_and_its_readers_take_that_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fifo: Path
) -> None:
    folded: list[str] = []
    real = Fold.__call__

    def counting(self: Fold, ev: object) -> object:
        folded.append(getattr(ev, "kind", "?"))
        return real(self, ev)  # type: ignore[arg-type]

    monkeypatch.setattr(Fold, "__call__", counting)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = SpanBuilder(provider.get_tracer("test"))
    metrics = StopMetrics(CollectorRegistry())
    seen = MemorySink()
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    telemetry = Telemetry(ledger=ledger, spans=spans, observers=[metrics, seen])
    rt = Runtime(LocalHost(subreaper=False), grace_s=GRACE, sink=telemetry)
    turn = rt.start_turn("s")
    read = turn.request("Read", {"path": str(fifo)})  # blocks on the pipe: raced at the stop
    await until(lambda: read.state is Phase.RUNNING, what="the read to start")
    assert await rt.abort("s") is Receipt.ACCEPTED
    release_fifo(fifo)
    ledger.close()
    recorded = [ev for _seq, ev in read_events(connect(ledger.path, readonly=True))]
    assert len(folded) == len(recorded) == len(seen)  # once each, in the writer
    # The readers stamped what was recorded (span ids), and the spans were built.
    abort = next(ev for ev in recorded if ev.kind == names.TOOLS_ABORT_SENT)
    assert abort.span_id is not None
    assert any(sp.name == names.SPAN_STOP for sp in exporter.get_finished_spans())


def test_a_ledger_takes_its_readers_once(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    try:
        Telemetry(ledger=ledger, observers=[MemorySink()])
        with pytest.raises(ValueError, match="already has its readers"):
            ledger.attach(Stages())
    finally:
        ledger.close()


def test_ledger_transform_and_observers_are_deprecated(tmp_path: Path) -> None:
    with pytest.warns(DeprecationWarning, match="Telemetry"):
        ledger = Ledger(tmp_path / "ledger.sqlite3", observers=[MemorySink()])
    ledger.close()


class _Failing:
    """A reader that raises on every event of one kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def on_step(self, st: Step) -> Event:
        if st.ev.kind == self.kind:
            raise RuntimeError(f"broken on {self.kind}")
        return st.ev


@pytest.mark.parametrize("with_ledger", [True, False])
def test_a_reader_that_fails_loses_no_event(
    tmp_path: Path, with_ledger: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Invariant 6: a span builder or an observer that raises is logged and counted; the
    readers after it still read the event, and the ledger still records it."""
    seen = MemorySink()
    ledger = Ledger(tmp_path / "ledger.sqlite3") if with_ledger else None
    telemetry = Telemetry(
        ledger=ledger,
        spans=_Failing(names.TOOL_STARTED),
        observers=[_Failing(names.TOOL_FINISHED), seen],
    )
    kinds = [names.TURN_STARTED, names.TOOL_REQUESTED, names.TOOL_STARTED, names.TOOL_FINISHED]
    for i, kind in enumerate(kinds):
        call = "c1" if kind.startswith("tool.") else None
        telemetry(Event(kind, "s", 1000.0 + i, turn="t1", call=call, tool="Grep" if call else None))
    if ledger is not None:
        ledger.close()
        recorded = [ev.kind for _seq, ev in read_events(connect(ledger.path, readonly=True))]
        assert recorded == kinds
    assert [ev.kind for ev in seen] == kinds
    assert telemetry.stages.errors == 2
    assert sum("still recorded" in r.getMessage() for r in caplog.records) == 2
