"""Metrics scraped over real HTTP and parsed with prometheus_client's parsers."""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from tests.conftest import GRACE, until
from turnwatch import names
from turnwatch.exporters import http
from turnwatch.exporters.metrics import LiveCollector, LiveState, StopMetrics, tool_label
from turnwatch.runtime import LocalHost, MemorySink, Runtime
from turnwatch.tracing.pipeline import Telemetry
from turnwatch.tracing.spans import SpanBuilder


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def endpoint(registry: CollectorRegistry) -> Iterator[str]:
    server, port = http.serve(registry, "127.0.0.1:0")
    yield f"http://127.0.0.1:{port}/metrics"
    http.stop(server)


def scrape(url: str) -> str:
    req = urllib.request.Request(
        url, headers={"Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
        text: str = resp.read().decode()
        return text


async def test_a_stop_is_scraped_with_exemplars(
    registry: CollectorRegistry, endpoint: str, fifo: Path, tmp_path: Path
) -> None:
    # Only what the stop itself produced is scraped here; the scrape-time gauges are checked
    # against a real scan in tests/watchdog/test_gauges.py.
    metrics = StopMetrics(registry)
    sink = MemorySink()
    spans = SpanBuilder(TracerProvider().get_tracer("t"))
    rt = Runtime(
        LocalHost(),
        grace_s=GRACE,
        sink=Telemetry(spans=spans, observers=[metrics, sink]),
        ask_permission=lambda tool, _c: tool == "Write",
    )
    turn = rt.start_turn("s")
    turn.request("Grep", {"pattern": "x", "path": str(fifo)})
    turn.request("Write", {"path": str(tmp_path / "w"), "content": "x"})
    await until(lambda: sink.of(names.PERMISSION_REQUESTED), what="the prompt")
    await rt.abort("s")

    parsed = text_string_to_metric_families(scrape(endpoint))  # type: ignore[no-untyped-call]
    families = {f.name: f for f in parsed}
    settle = families[names.M_STOP_TO_SETTLE]
    buckets = [s for s in settle.samples if s.name.endswith("_bucket")]
    assert {s.labels["le"] for s in buckets} >= {"0.0001", "0.005", "10.0"}
    hit = [s for s in buckets if s.exemplar is not None]
    assert hit, "a stop_to_settle bucket must carry a trace-id exemplar"
    assert hit[0].exemplar.labels["trace_id"] == sink.of(names.TURN_SETTLED)[0].trace_id
    assert hit[0].labels["mode"] == "adr"
    assert hit[0].labels["outcome"] == "aborted"
    count = {
        s.labels.get("mode"): s.value
        for s in families[names.M_STOPS].samples
        if s.name.endswith("_total")
    }
    assert count == {"adr": 1.0}
    assert registry.get_sample_value(names.M_RESULTS_DISCARDED + "_total", {"tool": "Grep"}) == 1
    assert registry.get_sample_value(names.M_PERMISSIONS_CANCELLED + "_total") == 1
    idle = registry.get_sample_value(names.M_STOP_TO_IDLE + "_count", {"mode": "adr"})
    assert idle == 1


def test_plain_prometheus_text_for_plain_scrapers(
    registry: CollectorRegistry, endpoint: str
) -> None:
    StopMetrics(registry)
    with urllib.request.urlopen(endpoint, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        assert names.M_STOP_TO_SETTLE in resp.read().decode()


def test_tool_labels_fold_extensions() -> None:
    assert tool_label("Grep") == "Grep"
    assert tool_label("mcp__github__create_issue") == "mcp"
    assert tool_label("my_plugin_tool") == "plugin"
    assert tool_label(None) == "plugin"


def test_bad_address_is_a_clear_error(registry: CollectorRegistry) -> None:
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        http.serve(registry, "9464")


@pytest.mark.prometheus
def test_the_exposition_passes_promtool_lint(registry: CollectorRegistry, endpoint: str) -> None:
    """Every family, the scrape-time gauges and the lost-events counter, as promtool reads them."""
    from tests.dashboards.test_dashboards import need

    StopMetrics(registry)
    registry.register(LiveCollector(lambda: LiveState({"grace": 1}, 0, 0, events_lost=3)))
    req = urllib.request.Request(endpoint, headers={"Accept": "text/plain"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read().decode()
    assert f"# TYPE {names.M_EVENTS_LOST}_total counter" in text
    assert f"{names.M_EVENTS_LOST}_total 3.0" in text
    lint = subprocess.run(
        [need("promtool"), "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_label_values_stay_in_their_closed_sets_whatever_a_runtime_writes() -> None:
    """A foreign runtime's own word for a mode, a policy, an outcome, a finding or a result, new
    in every session, is counted as ``other``: the series do not grow with history (design §4;
    they grew by one per session before, for as long as turnwatch ran)."""
    import io
    import json

    from turnwatch.runtime.model import FindingKind, Mode, Outcome, Policy, ToolClass
    from turnwatch.tracing.ingest import ingest

    def line(ts: float, kind: str, s: str, **kw: object) -> str:
        return json.dumps({"ts": ts, "kind": kind, "session": s, **kw})

    lines = []
    for i in range(40):
        s, t, call = f"s{i}", 1.7e9 + i, {"turn": "t", "call": "c", "tool": "Bash"}
        lines += [
            line(t, "runtime.started", s, attrs={"pid": 1, "create_time": 1.0, "mode": f"m{i}"}),
            line(t, "turn.started", s, turn="t"),
            line(t, "tool.requested", s, **call, attrs={"class": "process"}),
            line(t, "tool.started", s, **call),
            line(t + 0.1, "stop.clicked", s, turn="t"),
            line(t + 0.1, "abort.rpc.received", s, turn="t", attrs={"source": "ui"}),
            line(t + 0.1, "abort.walk.started", s, turn="t"),
            line(t + 0.1, "tools.abort.sent", s, **call, attrs={"policy": f"p{i}"}),
            line(t + 0.2, "tool.finished", s, **call, attrs={"outcome": f"o{i}"}),
            line(t + 0.2, "turn.settled", s, turn="t", attrs={"outcome": "aborted"}),
            line(t + 0.3, "processing.cleared", s, turn="t"),
            line(t + 0.4, "watchdog.finding", s, turn="t", attrs={"finding": f"f{i}"}),
            line(t + 0.5, "watchdog.recovered", s, turn="t", attrs={"result": f"r{i}"}),
        ]
    registry = CollectorRegistry()
    report = ingest(
        io.BytesIO("\n".join(lines).encode()), Telemetry(observers=[StopMetrics(registry)])
    )
    assert (report.good, report.bad_count) == (len(lines), 0)
    extra = {"other", "unknown"}
    allowed = {
        "mode": {m.value for m in Mode} | extra,
        "tool_class": {c.value for c in ToolClass} | extra,
        "policy": {p.value for p in Policy} | extra,
        "outcome": {o.value for o in Outcome} | extra,
        "kind": {k.value for k in FindingKind} | extra,
        "result": {"ok", "failed", "refused"} | extra,
    }
    seen: dict[str, set[str]] = {}
    for family in registry.collect():
        for sample in family.samples:
            for label, value in sample.labels.items():
                if label in allowed:
                    seen.setdefault(label, set()).add(value)
    for label, values in seen.items():
        assert values <= allowed[label], (label, values - allowed[label])
    assert {"mode", "policy", "outcome", "kind", "result"} <= seen.keys()
    stops = registry.get_sample_value(names.M_STOPS + "_total", {"mode": "other"})
    assert stops == 40  # every stop counted, under one series


def test_a_monotonic_clock_that_went_back_is_not_read_as_an_instant_stop() -> None:
    """A foreign runtime's ``mono_ns`` counts from its own start; restarted between a stop and
    its settlement, it records the settlement on a clock that began again. The stop took 30 s
    by the wall clock both records share: not 0 s."""
    import io
    import json

    from turnwatch.tracing.ingest import ingest

    def line(ts: float, kind: str, mono: int, **kw: object) -> str:
        return json.dumps({"ts": ts, "kind": kind, "session": "s", "mono_ns": mono, **kw})

    t, began = 1.7e9, 7_200 * 10**9  # two hours into the first process; 5 s into the second
    lines = [
        line(t, "runtime.started", began - 10**9, attrs={"pid": 1, "create_time": 1.0}),
        line(t, "turn.started", began - 10**9, turn="t"),
        line(t + 1, "abort.rpc.received", began, turn="t"),
        line(t + 31, "turn.settled", 5 * 10**9, turn="t", attrs={"outcome": "aborted"}),
    ]
    registry = CollectorRegistry()
    report = ingest(
        io.BytesIO("\n".join(lines).encode()), Telemetry(observers=[StopMetrics(registry)])
    )
    assert (report.good, report.bad_count) == (len(lines), 0)
    took = registry.get_sample_value(
        f"{names.M_STOP_TO_SETTLE}_sum", {"mode": "unknown", "outcome": "aborted"}
    )
    assert took == pytest.approx(30.0)
