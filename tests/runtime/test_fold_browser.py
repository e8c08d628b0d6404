"""The browser's own ends of a stop, read by the fold: its click and its idle, on the browser's
clock, measure stop → idle once, whichever of the click and the server's ``agent.abort`` lands
first; an idle without its click measures nothing; and the stops whose idle never comes are
kept bounded.
"""

from __future__ import annotations

import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from tests.runtime.test_fold import Spans, ev
from turnwatch import names
from turnwatch.exporters.metrics import StopMetrics
from turnwatch.runtime.events import Event
from turnwatch.runtime.fold import Fold, Move
from turnwatch.tracing.spans import SpanBuilder

_BROWSER = {
    names.K_SOURCE: names.SOURCE_BROWSER,
    names.K_TRACEPARENT: "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
}


def _browser_stop(t: float, order: str, skew: float) -> list[Event]:
    """A stop the browser clicked: its clock runs ``skew`` s ahead of the server's."""
    click = ev(t + 0.010 + skew, names.STOP_CLICKED, attrs=dict(_BROWSER))
    rpc = ev(
        t + 0.012,
        names.ABORT_RPC_RECEIVED,
        attrs={names.K_RECEIPT: "accepted", names.K_TRACEPARENT: _BROWSER[names.K_TRACEPARENT]},
    )
    server = [
        ev(t + 0.013, names.ABORT_WALK_STARTED),
        ev(t + 0.020, names.TURN_SETTLED, attrs={names.K_OUTCOME: "aborted"}),
        ev(t + 0.021, names.ABORT_RPC_RETURNED, attrs={names.K_RECEIPT: "accepted"}),
        ev(t + 0.022, names.PROCESSING_CLEARED),
    ]
    idle = ev(t + 0.040 + skew, names.PROCESSING_CLEARED, attrs=dict(_BROWSER))
    if order == "click_first":
        return [ev(t, names.TURN_STARTED), click, rpc, *server, idle]
    if order == "rpc_first":
        return [ev(t, names.TURN_STARTED), rpc, click, *server, idle]
    return [ev(t, names.TURN_STARTED), rpc, *server, click, idle]  # after the server's idle


@pytest.mark.parametrize("order", ["click_first", "rpc_first", "after_cleared"])
@pytest.mark.parametrize("skew", [0.0, 3600.0, -3600.0])
def test_stop_to_idle_is_measured_once_whichever_request_lands_first(
    order: str, skew: float
) -> None:
    registry = CollectorRegistry()
    metrics = StopMetrics(registry)
    provider = TracerProvider()
    spans = Spans()
    provider.add_span_processor(spans)
    builder = SpanBuilder(provider.get_tracer("t"))
    fold = Fold()
    moves: list[Move] = []
    stamped = []
    for e in _browser_stop(time.time(), order, skew):
        st = fold(e)
        moves += st.moves
        metrics.on_step(st)
        stamped.append(builder.on_step(st))
    assert moves.count(Move.STOP) == 1
    assert moves.count(Move.UI_CLICK) == 1
    assert moves.count(Move.UI_IDLE) == 1
    idle = registry.get_sample_value(names.M_STOP_TO_IDLE + "_count", {"mode": "unknown"})
    total = registry.get_sample_value(names.M_STOP_TO_IDLE + "_sum", {"mode": "unknown"})
    assert idle == 1  # once: by the browser's idle, or by the server's when the click came late
    if order == "after_cleared":  # the server had measured it (agent.abort → its idle)
        assert total == pytest.approx(0.010, abs=1e-6)
    else:  # 40 ms - 10 ms on the browser's clock, whatever the skew
        assert total == pytest.approx(0.030, abs=1e-6)
    # Every event of the stop, the browser's two included, is stamped with the click's trace.
    assert {e.trace_id for e in stamped[1:]} == {"a" * 32}
    (root,) = spans.named(names.SPAN_STOP)
    assert root.parent is not None
    assert root.parent.span_id == int("b" * 16, 16)
    assert format(root.context.trace_id, "032x") == "a" * 32
    if order == "rpc_first":  # the click, arriving late, is still on the trace
        assert [e.name for e in root.events] == [names.STOP_CLICKED, names.PROCESSING_CLEARED]


def test_a_browser_idle_without_its_click_measures_nothing() -> None:
    registry = CollectorRegistry()
    metrics = StopMetrics(registry)
    fold = Fold()
    t = time.time()
    for e in [
        ev(t, names.TURN_STARTED),
        ev(t + 0.01, names.ABORT_RPC_RECEIVED, attrs={names.K_RECEIPT: "accepted"}),
        ev(t + 0.02, names.PROCESSING_CLEARED),
        ev(t + 0.03, names.PROCESSING_CLEARED, attrs=dict(_BROWSER)),
    ]:
        metrics.on_step(fold(e))
    # The server's idle measured it; a stray browser idle adds nothing.
    assert registry.get_sample_value(names.M_STOP_TO_IDLE + "_count", {"mode": "unknown"}) == 1


def test_a_long_running_span_builder_keeps_a_bounded_number_of_ended_stops() -> None:
    from turnwatch.tracing import spans as spans_module

    builder = SpanBuilder(TracerProvider().get_tracer("t"))
    t = time.time()
    for i in range(spans_module.MAX_ENDED_STOPS + 50):
        for e in _browser_stop(t, "click_first", 0.0)[:-1]:  # no browser idle ever comes
            builder(e._replace(session=f"s{i}"))
    assert len(builder._ended) == spans_module.MAX_ENDED_STOPS  # noqa: SLF001
