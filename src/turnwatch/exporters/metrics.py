"""Prometheus metrics of design §4, from the event stream, on an injectable registry.

Counters and histograms are fed by events (live, or replayed from a ledger); the gauges that
describe a scanned state (in-flight calls, pinned sessions, aborted turns with live processes)
are computed at scrape time by :class:`LiveCollector`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.runtime.model import BUILTIN_CLASSES, POLICY_OF, ToolClass, class_of

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
_RELEASES = {names.TOOL_FINISHED, names.TOOL_RESULT_DISCARDED}
RECOVERY_RESULTS = ("ok", "failed", "refused", "skipped")


def tool_label(tool: str | None) -> str:
    """A closed label set: built-in names, else ``mcp`` or ``plugin``."""
    if tool is not None and tool in BUILTIN_CLASSES:
        return tool
    return "mcp" if tool and tool.startswith("mcp__") else "plugin"


def _elapsed(a: Event, b: Event) -> float:
    """Seconds from ``a`` to ``b``: monotonic when both have it (same process), else wall."""
    if a.mono_ns is not None and b.mono_ns is not None and a.session == b.session:
        return max(0.0, (b.mono_ns - a.mono_ns) / 1e9)
    return max(0.0, b.ts_unix - a.ts_unix)


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
        # Per-stream state: mode per session, first stop per turn, abort sent per call.
        self._mode: dict[str, str] = {}
        self._stop: dict[tuple[str, str], Event] = {}
        self._abort: dict[tuple[str, str], Event] = {}
        self._class: dict[tuple[str, str], ToolClass] = {}
        # Series that exist from the start, at zero: rate() and increase() need a sample before
        # the first event, and an alert on failures must see "0 failures", not "no data".
        for kind in names.FINDING_KINDS:
            self.findings.labels(kind=kind)
        for result in RECOVERY_RESULTS:
            self.recoveries.labels(result=result)
        for tool in ("Bash", "GenerateImages"):
            self.grace_expired.labels(tool=tool)
        for tool in ("Read", "Glob", "Grep"):
            self.discarded.labels(tool=tool)

    def __call__(self, ev: Event) -> None:
        self.observe(ev)

    def observe(self, ev: Event) -> None:
        kind = ev.kind
        if kind == names.RUNTIME_STARTED:
            self._mode[ev.session] = str(ev.attrs.get("mode") or "unknown")
        elif kind in (names.STOP_CLICKED, names.ABORT_RPC_RECEIVED) and ev.turn:
            if (ev.session, ev.turn) not in self._stop and ev.attrs.get("receipt") in (
                None,
                "accepted",
            ):
                self._stop[(ev.session, ev.turn)] = ev
                self.stops.labels(mode=self._mode.get(ev.session, "unknown")).inc()
        elif kind == names.TURN_SETTLED and ev.turn:
            start = self._stop.get((ev.session, ev.turn))
            if start is not None:
                self.stop_to_settle.labels(
                    mode=self._mode.get(ev.session, "unknown"),
                    outcome=str(ev.attrs.get("outcome", "unknown")),
                ).observe(_elapsed(start, ev), _exemplar(ev))
        elif kind == names.PROCESSING_CLEARED and ev.turn:
            start = self._stop.pop((ev.session, ev.turn), None)
            if start is not None:
                self.stop_to_idle.labels(mode=self._mode.get(ev.session, "unknown")).observe(
                    _elapsed(start, ev), _exemplar(ev)
                )
        elif kind == names.TOOL_REQUESTED and ev.call:
            self._class[(ev.session, ev.call)] = class_of(ev.tool or "", ev.attrs.get("class"))
        elif kind == names.TOOLS_ABORT_SENT and ev.call:
            self._abort.setdefault((ev.session, ev.call), ev)
        elif kind in _RELEASES and ev.call:
            key = (ev.session, ev.call)
            cls = self._class.pop(key, None) or class_of(ev.tool or "")
            sent = self._abort.pop(key, None)
            if kind == names.TOOL_RESULT_DISCARDED:
                self.discarded.labels(tool=tool_label(ev.tool)).inc()
            if sent is not None:
                self.tool_abort.labels(
                    tool_class=cls.value,
                    policy=POLICY_OF[cls].value,
                    outcome=str(ev.attrs.get("outcome", "unknown")),
                ).observe(_elapsed(sent, ev), _exemplar(ev))
        elif kind == names.TOOL_REFUSED and ev.call:
            self._class.pop((ev.session, ev.call), None)  # never starts, never released
        elif kind == names.TOOL_GRACE_EXPIRED:
            self.grace_expired.labels(tool=tool_label(ev.tool)).inc()
        elif kind == names.PERMISSION_CANCELLED:
            self.permissions_cancelled.inc()
        elif kind == names.WATCHDOG_FINDING:
            self.findings.labels(kind=str(ev.attrs.get("finding", "unknown"))).inc()
        elif kind == names.WATCHDOG_RECOVERED:
            self.recoveries.labels(result=str(ev.attrs.get("result", "unknown"))).inc()


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

    def collect(self) -> Iterable[GaugeMetricFamily]:
        state = self.source()
        inflight = GaugeMetricFamily(names.M_INFLIGHT, "Tool calls in flight.", labels=["policy"])
        for policy in ("race", "grace", "await"):
            inflight.add_metric([policy], state.inflight_by_policy.get(policy, 0))
        yield inflight
        yield GaugeMetricFamily(
            names.M_PINNED, "Sessions pinned processing.", value=state.pinned_sessions
        )
        yield GaugeMetricFamily(
            names.M_ABORTED_LIVE,
            "Turns recorded aborted whose tool process still lives.",
            value=state.aborted_with_live_processes,
        )
        yield GaugeMetricFamily(
            names.M_EVENTS_LOST + "_total",
            "Events the ledger could not write.",
            value=state.events_lost,
        )

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []
