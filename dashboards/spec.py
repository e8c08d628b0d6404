"""Every PromQL expression turnwatch ships, in one place.

``generate.py`` turns this into the Grafana dashboards (with Grafana's foundation SDK) and the
Prometheus rule files; the tests evaluate every expression here against a real Prometheus.
Metric names come from ``turnwatch.names``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from turnwatch import names as n

RUNBOOKS = "https://github.com/turnwatch/turnwatch/blob/main/docs/runbooks"
#: The grace window alerts compare stop → settle against (the runtime's default).
GRACE_S = 10
WATCHDOG_JOB = "turnwatch-watchdog"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    exemplar: bool = False
    heatmap: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    kind: str  # timeseries, stat, heatmap
    queries: tuple[Query, ...]
    unit: str = "short"
    description: str = ""
    width: int = 12


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]
    tags: tuple[str, ...] = ("turnwatch",)


@dataclass(frozen=True)
class Recording:
    record: str
    expr: str


@dataclass(frozen=True)
class Alert:
    name: str
    query: str  # what is measured; the test checks it returns data
    condition: str  # appended to the query to make the alert expression
    for_: str
    severity: str
    summary: str
    description: str
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def expr(self) -> str:
        return f"{self.query} {self.condition}".strip()

    @property
    def runbook(self) -> str:
        return f"{RUNBOOKS}/{self.name}.md"


def _q(quantile: float, metric: str, by: str, window: str = "5m") -> str:
    return f"histogram_quantile({quantile}, sum by (le, {by}) (rate({metric}_bucket[{window}])))"


QUANTILES = ((0.5, "p50"), (0.95, "p95"), (0.99, "p99"))

RECORDINGS = tuple(
    [
        Recording(
            f"mode_outcome:{n.M_STOP_TO_SETTLE}:{p}_rate5m",
            _q(q, n.M_STOP_TO_SETTLE, "mode, outcome"),
        )
        for q, p in QUANTILES
    ]
    + [
        Recording(f"mode:{n.M_STOP_TO_IDLE}:{p}_rate5m", _q(q, n.M_STOP_TO_IDLE, "mode"))
        for q, p in QUANTILES
    ]
    + [
        Recording(
            f"class_policy:{n.M_TOOL_ABORT}:p99_rate5m",
            _q(0.99, n.M_TOOL_ABORT, "tool_class, policy"),
        )
    ]
)

ALERTS = (
    Alert(
        "TurnwatchSessionsPinned",
        f"max by (instance) ({n.M_PINNED})",
        "> 0",
        "5m",
        "warning",
        'Agent sessions are pinned "processing" on {{ $labels.instance }}.',
        '{{ $value }} session(s) stayed "processing" after a stop for 5 minutes: the abort '
        "RPC never returned, or processing was never cleared. Users cannot start a new turn.",
    ),
    Alert(
        "TurnwatchAbortedTurnsWithLiveProcesses",
        f"max by (instance) ({n.M_ABORTED_LIVE})",
        "> 0",
        "5m",
        "critical",
        "Stopped turns still have live tool processes on {{ $labels.instance }}.",
        "{{ $value }} turn(s) recorded as stopped while a tool process they started still "
        "runs, past the grace window. The user was told the work stopped; it did not.",
    ),
    Alert(
        "TurnwatchStopToSettleSlow",
        f"max by (mode) (mode_outcome:{n.M_STOP_TO_SETTLE}:p99_rate5m)",
        f"> {GRACE_S}",
        "15m",
        "warning",
        "Stops take longer than the grace window to settle ({{ $labels.mode }}).",
        "p99 of stop → turn settled is {{ $value | humanizeDuration }}, above the "
        f"{GRACE_S} s grace window, in mode {{{{ $labels.mode }}}}. Something holds turns open "
        "after Stop.",
    ),
    Alert(
        "TurnwatchRecoveriesFailing",
        f'sum by (instance) (increase({n.M_RECOVERIES}_total{{result=~"failed|refused"}}[15m]))',
        "> 0",
        "0m",
        "warning",
        "The watchdog fails to recover pinned sessions on {{ $labels.instance }}.",
        "Watchdog recovery attempts failed or were refused in the last 15 minutes; the "
        "sessions they were for stay pinned. `turnwatch watch --once --json` says why.",
    ),
    Alert(
        "TurnwatchWatchdogAbsent",
        f'max(up{{job="{WATCHDOG_JOB}"}})',
        f'== 0 or absent(up{{job="{WATCHDOG_JOB}"}})',
        "10m",
        "warning",
        "The turnwatch watchdog is down or not scraped.",
        f"No healthy scrape of job {WATCHDOG_JOB} for 10 minutes (or no such target at all): "
        "pinned sessions and orphaned tool processes go unnoticed.",
    ),
)

_SETTLE_BY = "mode, outcome"
LEGEND_MO = "{{mode}} {{outcome}}"  # Grafana's legend template, not Python's
STOPS = Dashboard(
    "turnwatch-stops",
    "turnwatch / Stops",
    'How long a user\'s Stop takes to settle the turn and clear "processing", and what it did '
    "to each tool call.",
    (
        Panel(
            "Stop → settle (p50, p95, p99)",
            "timeseries",
            (
                *(
                    Query(f"mode_outcome:{n.M_STOP_TO_SETTLE}:{p}_rate5m", f"{p} {LEGEND_MO}")
                    for _q2, p in QUANTILES
                ),
                Query(
                    f"sum by (le, {_SETTLE_BY}) "
                    f"(rate({n.M_STOP_TO_SETTLE}_bucket[$__rate_interval]))",
                    "exemplars",
                    exemplar=True,
                ),
            ),
            "s",
            "From the click (or the abort RPC) to the turn settled. Exemplars link to the "
            "stop's trace.",
        ),
        Panel(
            "Stop → idle (p50, p95, p99)",
            "timeseries",
            tuple(
                Query(f"mode:{n.M_STOP_TO_IDLE}:{p}_rate5m", f"{p} {{{{mode}}}}")
                for _q2, p in QUANTILES
            ),
            "s",
            'From the click to "processing" cleared in the UI.',
        ),
        Panel(
            "Stop → settle heatmap",
            "heatmap",
            (
                Query(
                    f"sum by (le) (increase({n.M_STOP_TO_SETTLE}_bucket[$__rate_interval]))",
                    heatmap=True,
                ),
            ),
            "s",
            width=24,
        ),
        Panel(
            "tools.abort → released, p99 by class and policy",
            "timeseries",
            (Query(f"class_policy:{n.M_TOOL_ABORT}:p99_rate5m", "{{tool_class}} / {{policy}}"),),
            "s",
            "race should be microseconds, grace at most the window, await as long as the "
            "host takes.",
        ),
        Panel(
            "Stops per minute",
            "timeseries",
            (Query(f"sum by (mode) (rate({n.M_STOPS}_total[$__rate_interval])) * 60", "{{mode}}"),),
            "short",
        ),
        Panel(
            "Grace windows expired",
            "timeseries",
            (
                Query(
                    f"sum by (tool) (increase({n.M_GRACE_EXPIRED}_total[$__rate_interval]))",
                    "{{tool}}",
                ),
            ),
            "short",
            "The host did not answer within the grace window.",
        ),
        Panel(
            "Raced results discarded",
            "timeseries",
            (
                Query(
                    f"sum by (tool) (increase({n.M_RESULTS_DISCARDED}_total[$__rate_interval]))",
                    "{{tool}}",
                ),
            ),
            "short",
        ),
        Panel(
            "Permission prompts cancelled by a stop",
            "timeseries",
            (
                Query(
                    f"sum(increase({n.M_PERMISSIONS_CANCELLED}_total[$__rate_interval]))",
                    "cancelled",
                ),
            ),
            "short",
        ),
        Panel(
            "Tool calls in flight",
            "timeseries",
            (Query(f"sum by (policy) ({n.M_INFLIGHT})", "{{policy}}"),),
            "short",
        ),
        Panel(
            "Pinned sessions", "stat", (Query(f"sum({n.M_PINNED})", "pinned"),), "short", width=6
        ),
        Panel(
            "Aborted turns with live processes",
            "stat",
            (Query(f"sum({n.M_ABORTED_LIVE})", "turns"),),
            "short",
            width=6,
        ),
    ),
)

WATCHDOG = Dashboard(
    "turnwatch-watchdog",
    "turnwatch / Watchdog",
    "What the watchdog finds after stops, and how its recoveries go.",
    (
        Panel(
            "Findings by kind",
            "timeseries",
            (
                Query(
                    f"sum by (kind) (increase({n.M_FINDINGS}_total[$__rate_interval]))", "{{kind}}"
                ),
            ),
            "short",
        ),
        Panel(
            "Recoveries by result",
            "timeseries",
            (
                Query(
                    f"sum by (result) (increase({n.M_RECOVERIES}_total[$__rate_interval]))",
                    "{{result}}",
                ),
            ),
            "short",
        ),
        Panel(
            "Scan duration (p50, p99)",
            "timeseries",
            (
                Query(_q(0.5, n.M_SCAN, "instance", "$__rate_interval"), "p50 {{instance}}"),
                Query(_q(0.99, n.M_SCAN, "instance", "$__rate_interval"), "p99 {{instance}}"),
            ),
            "s",
        ),
        Panel(
            "Pinned sessions",
            "timeseries",
            (Query(f"sum by (instance) ({n.M_PINNED})", "{{instance}}"),),
            "short",
        ),
        Panel(
            "Aborted turns with live processes",
            "timeseries",
            (Query(f"sum by (instance) ({n.M_ABORTED_LIVE})", "{{instance}}"),),
            "short",
        ),
    ),
)

DASHBOARDS = (STOPS, WATCHDOG)
