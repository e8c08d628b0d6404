"""Prometheus metrics of design §4, from the event stream, on an injectable registry.

Counters and histograms are fed by events (live, or replayed from a ledger); the gauges that
describe a scanned state (in-flight calls, pinned sessions, aborted turns with live processes)
are computed at scrape time by :class:`LiveCollector`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.runtime.fold import (
    IDLE_BY_SERVER,
    Fold,
    Move,
    Step,
    Store,
)
from turnwatch.runtime.model import (
    BUILTIN_CLASSES,
    RECORDED_RESULTS,
    FindingKind,
    Mode,
    Outcome,
    Policy,
    ToolClass,
    TurnOutcome,
)

#: Fine below 10 ms (race releases in µs), a boundary on the 10 s grace window, long tail after.
STOP_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.0075,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    15.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
)
SCAN_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0)


#: What a label whose value is none of its closed set says (design §4: label values come from
#: closed sets). A foreign runtime's own word for a mode, a policy or an outcome (or a new one
#: per session) would otherwise add series without bound for as long as turnwatch runs: memory
#: here, and every scrape.
OTHER = "other"
#: What a label says where the event said nothing.
UNKNOWN = "unknown"
_MODES = frozenset(m.value for m in Mode)
_TURN_OUTCOMES = frozenset(o.value for o in TurnOutcome)
_CLASSES = frozenset(c.value for c in ToolClass)
_POLICIES = frozenset(p.value for p in Policy)
_OUTCOMES = frozenset(o.value for o in Outcome)
_FINDINGS = frozenset(k.value for k in FindingKind)
_RESULTS = frozenset(r.value for r in RECORDED_RESULTS)


def closed(value: object, allowed: frozenset[str]) -> str:
    """``value`` as a label of the closed set ``allowed``: itself, ``unknown`` when missing,
    ``other`` when it is none of them."""
    if value is None or value == "":
        return UNKNOWN
    return value if isinstance(value, str) and value in allowed else OTHER


def tool_label(tool: str | None) -> str:
    """A closed label set: built-in names, else ``mcp`` or ``plugin``."""
    if tool is not None and tool in BUILTIN_CLASSES:
        return tool
    return "mcp" if tool and tool.startswith("mcp__") else "plugin"


def _since(ts: float | None, mono: int | None, ev: Event) -> float:
    """Seconds from a recorded instant to ``ev``: monotonic when both have it, else wall."""
    if mono is not None and ev.mono_ns is not None and ev.mono_ns >= mono:
        return (ev.mono_ns - mono) / 1e9
    # A monotonic clock that went back is two clocks (two boots, two runtimes' own origins):
    # the wall clock is the one they share.
    return max(0.0, ev.ts_unix - (ts if ts is not None else ev.ts_unix))


def _exemplar(ev: Event) -> dict[str, str] | None:
    return {"trace_id": ev.trace_id} if ev.trace_id else None


class StopMetrics:
    """The event-fed metrics. Call it with each event, in order."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.stop_to_settle = Histogram(
            names.M_STOP_TO_SETTLE,
            "User stop to turn settled.",
            ["mode", "outcome"],
            buckets=STOP_BUCKETS,
            registry=registry,
        )
        self.stop_to_idle = Histogram(
            names.M_STOP_TO_IDLE,
            "User stop to processing cleared (the UI idle).",
            ["mode"],
            buckets=STOP_BUCKETS,
            registry=registry,
        )
        self.tool_abort = Histogram(
            names.M_TOOL_ABORT,
            "tools.abort sent to the call released.",
            ["tool_class", "policy", "outcome"],
            buckets=STOP_BUCKETS,
            registry=registry,
        )
        self.stops = Counter(
            names.M_STOPS, "Stops that reached a live turn.", ["mode"], registry=registry
        )
        self.discarded = Counter(
            names.M_RESULTS_DISCARDED, "Raced results discarded.", ["tool"], registry=registry
        )
        self.grace_expired = Counter(
            names.M_GRACE_EXPIRED, "Grace windows that ran out.", ["tool"], registry=registry
        )
        self.permissions_cancelled = Counter(
            names.M_PERMISSIONS_CANCELLED, "Permission prompts closed by a stop.", registry=registry
        )
        self.findings = Counter(names.M_FINDINGS, "Watchdog findings.", ["kind"], registry=registry)
        self.recoveries = Counter(
            names.M_RECOVERIES, "Watchdog recoveries.", ["result"], registry=registry
        )
        self.scan = Histogram(
            names.M_SCAN, "One watchdog scan.", buckets=SCAN_BUCKETS, registry=registry
        )
        # Where stops begin and what releases a call: the fold's rules, not ours.
        # Only for a stream read event by event (``observe``): a pipeline hands it steps.
        self._fold: Fold | None = None
        # Series that exist from the start, at zero: rate() and increase() need a sample before
        # the first event, and an alert on failures must see "0 failures", not "no data".
        for kind in names.FINDING_KINDS:
            self.findings.labels(kind=kind)
        for result in RECORDED_RESULTS:
            self.recoveries.labels(result=result.value)
        for tool in ("Bash", "GenerateImages"):
            self.grace_expired.labels(tool=tool)
        for tool in ("Read", "Glob", "Grep"):
            self.discarded.labels(tool=tool)

    def __call__(self, ev: Event) -> None:
        self.observe(ev)

    def observe(self, ev: Event) -> None:
        """Count one event (in stream order)."""
        if self._fold is None:
            self._fold = Fold(Store.for_reader())
        self.on_step(self._fold(ev))

    def on_step(self, st: Step) -> None:
        """Count one step (a pipeline that folds once calls this)."""
        for move in st.moves:
            on = self._ON_MOVE.get(move)
            if on is not None:
                on(self, st)

    def _mode(self, st: Step) -> str:
        return closed(st.session.mode, _MODES)

    def _on_stop(self, st: Step) -> None:
        self.stops.labels(mode=self._mode(st)).inc()

    def _on_settled(self, st: Step) -> None:
        s = st.session
        if s.stopped:
            outcome = closed(s.outcome, _TURN_OUTCOMES)
            self.stop_to_settle.labels(mode=self._mode(st), outcome=outcome).observe(
                _since(s.stop_ts, s.stop_mono, st.ev), _exemplar(st.ev)
            )

    def _on_cleared(self, st: Step) -> None:
        s = st.session
        # A stop the browser clicked is measured by the browser, at both ends (UI_IDLE).
        if s.idle_by == IDLE_BY_SERVER:
            self.stop_to_idle.labels(mode=self._mode(st)).observe(
                _since(s.stop_ts, s.stop_mono, st.ev), _exemplar(st.ev)
            )

    def _on_ui_idle(self, st: Step) -> None:
        s = st.session
        if (
            s.idle_by == names.SOURCE_BROWSER
            and s.ui_click_ts is not None
            and s.ui_idle_ts is not None
        ):
            self.stop_to_idle.labels(mode=self._mode(st)).observe(
                max(0.0, s.ui_idle_ts - s.ui_click_ts), _exemplar(st.ev)
            )

    def _on_released(self, st: Step) -> None:
        c = st.call
        assert c is not None
        if c.outcome == Outcome.DISCARDED.value:
            self.discarded.labels(tool=tool_label(c.tool)).inc()
        if c.abort_ts is not None:
            self.tool_abort.labels(
                tool_class=closed(c.tool_class, _CLASSES),
                policy=closed(c.policy, _POLICIES),
                outcome=closed(c.outcome, _OUTCOMES),
            ).observe(_since(c.abort_ts, c.abort_mono, st.ev), _exemplar(st.ev))

    def _on_grace_expired(self, st: Step) -> None:
        self.grace_expired.labels(tool=tool_label(st.ev.tool)).inc()

    def _on_cancelled(self, st: Step) -> None:
        self.permissions_cancelled.inc()

    def _on_finding(self, st: Step) -> None:
        self.findings.labels(kind=closed(st.ev.attrs.get(names.K_FINDING), _FINDINGS)).inc()

    def _on_recovered(self, st: Step) -> None:
        self.recoveries.labels(result=closed(st.ev.attrs.get(names.K_RESULT), _RESULTS)).inc()

    #: What each move does here; a move not listed does nothing.
    _ON_MOVE: ClassVar[Mapping[Move, Callable[[StopMetrics, Step], None]]] = {
        Move.STOP: _on_stop,
        Move.SETTLED: _on_settled,
        Move.CLEARED: _on_cleared,
        Move.UI_IDLE: _on_ui_idle,
        Move.RELEASED: _on_released,
        Move.GRACE_EXPIRED: _on_grace_expired,
        Move.CANCELLED: _on_cancelled,
        Move.FINDING: _on_finding,
        Move.RECOVERED: _on_recovered,
    }


@dataclass(frozen=True)
class LiveState:
    """What a scan sees now: the gauges' values."""

    inflight_by_policy: Mapping[str, int]
    pinned_sessions: int
    aborted_with_live_processes: int
    events_lost: int = 0


class LiveCollector(Collector):
    """Gauges computed at scrape time from ``source()`` (a ledger view, or a live runtime)."""

    def __init__(self, source: Callable[[], LiveState]) -> None:
        self.source = source

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        state = self.source()
        inflight = GaugeMetricFamily(names.M_INFLIGHT, "Tool calls in flight.", labels=["policy"])
        for policy in Policy:
            inflight.add_metric([policy.value], state.inflight_by_policy.get(policy.value, 0))
        yield inflight
        yield GaugeMetricFamily(
            names.M_PINNED, "Sessions pinned processing.", value=state.pinned_sessions
        )
        yield GaugeMetricFamily(
            names.M_ABORTED_LIVE,
            "Turns recorded aborted whose tool process still lives.",
            value=state.aborted_with_live_processes,
        )
        # A counter: it only grows while the writer lives (promtool lints a _total gauge).
        yield CounterMetricFamily(
            names.M_EVENTS_LOST, "Events the ledger could not write.", value=state.events_lost
        )

    def describe(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        return []
