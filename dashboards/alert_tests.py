"""Scenarios for ``promtool test rules``: every alert firing, and not firing.

Rendered into dashboards/prometheus/alerts_test.yml by ``generate.py``; the expected annotations
are the spec's templates expanded, so a changed template is tested, not copied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dashboards import spec

STM = "turnwatch_stop_to_settle_seconds_bucket"
ABORTED_LIVE_A = 'turnwatch_aborted_turns_with_live_processes{instance="a:9464", job="turnwatch"}'


@dataclass(frozen=True)
class Case:
    alert: str
    series: dict[str, str]
    quiet_at: str  # an evaluation time at which it must not fire
    fires_at: str | None  # one at which it must, or None for a not-firing-only case
    labels: dict[str, str]
    value: str = "1"


def _stm(mode: str, le: str, per_min: int) -> tuple[str, str]:
    return (
        f'{STM}{{mode="{mode}", outcome="aborted", le="{le}", instance="a:9464"}}',
        f"0+{per_min}x40",
    )


def _stop_histogram(mode: str, per_min_by_le: dict[str, int]) -> dict[str, str]:
    """Bucket series of stop → settle: cumulative stops per minute at each bucket bound."""
    return dict(_stm(mode, le, n) for le, n in per_min_by_le.items())


CASES = (
    Case(
        "TurnwatchSessionsPinned",
        {
            'turnwatch_pinned_sessions{instance="a:9464", job="turnwatch"}': "0 0 1x10",
            'turnwatch_pinned_sessions{instance="b:9464", job="turnwatch"}': "0x12",
        },
        quiet_at="5m",
        fires_at="9m",
        labels={"instance": "a:9464"},
    ),
    Case(
        "TurnwatchAbortedTurnsWithLiveProcesses",
        {ABORTED_LIVE_A: "0 0 2x10"},
        quiet_at="5m",
        fires_at="9m",
        labels={"instance": "a:9464"},
        value="2",
    ),
    Case(
        "TurnwatchStopToSettleSlow",
        _stop_histogram("adr", {"1": 0, "10": 0, "30": 10, "+Inf": 10}),
        quiet_at="10m",
        fires_at="25m",
        labels={"mode": "adr"},
        value="29.8",
    ),
    Case(
        "TurnwatchStopToSettleSlow",  # fast stops: never fires
        _stop_histogram("adr", {"1": 10, "10": 10, "30": 10, "+Inf": 10}),
        quiet_at="25m",
        fires_at=None,
        labels={},
    ),
    Case(
        "TurnwatchRecoveriesFailing",
        {
            'turnwatch_watchdog_recoveries_total{result="failed", instance="w:9464"}': "0 0 1x10",
            'turnwatch_watchdog_recoveries_total{result="ok", instance="w:9464"}': "0+1x12",
        },
        quiet_at="1m",
        fires_at="5m",
        labels={"instance": "w:9464"},
    ),
    Case(
        "TurnwatchRecoveriesFailing",  # only successes: never fires
        {
            'turnwatch_watchdog_recoveries_total{result="ok", instance="w:9464"}': "0+1x12",
            'turnwatch_watchdog_recoveries_total{result="failed", instance="w:9464"}': "0x12",
        },
        quiet_at="10m",
        fires_at=None,
        labels={},
    ),
    Case(
        "TurnwatchWatchdogAbsent",
        {f'up{{job="{spec.WATCHDOG_JOB}", instance="w:9464"}}': "1 1 0x15"},
        quiet_at="5m",
        fires_at="14m",
        labels={},
        value="0",
    ),
    Case(
        "TurnwatchWatchdogAbsent",  # no target at all: absent() fires
        {'up{job="turnwatch", instance="a:9464"}': "1x15"},
        quiet_at="5m",
        fires_at="14m",
        labels={"job": spec.WATCHDOG_JOB},
    ),
)


def _expand(text: str, labels: dict[str, str], value: str) -> str:
    def human(v: str) -> str:
        return f"{float(v):g}s"

    text = re.sub(r"\{\{ \$value \| humanizeDuration \}\}", human(value), text)
    text = text.replace("{{ $value }}", value)
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), text)


def render() -> dict[str, Any]:
    alerts = {a.name: a for a in spec.ALERTS}
    tests = []
    for case in CASES:
        a = alerts[case.alert]
        checks: list[dict[str, Any]] = [
            {"eval_time": case.quiet_at, "alertname": a.name, "exp_alerts": []}
        ]
        if case.fires_at is not None:
            labels = {"severity": a.severity, **a.labels, **case.labels}
            checks.append(
                {
                    "eval_time": case.fires_at,
                    "alertname": a.name,
                    "exp_alerts": [
                        {
                            "exp_labels": labels,
                            "exp_annotations": {
                                "summary": _expand(a.summary, labels, case.value),
                                "description": _expand(a.description, labels, case.value),
                                "runbook_url": a.runbook,
                            },
                        }
                    ],
                }
            )
        tests.append(
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
                "alert_rule_test": checks,
            }
        )
    return {"rule_files": ["rules.yml", "alerts.yml"], "evaluation_interval": "1m", "tests": tests}
