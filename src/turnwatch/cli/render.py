"""Rich rendering of what the library returns; no logic of its own."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from turnwatch.cli.scenario import DemoReport

_OUTCOME_STYLE = {
    "discarded": "cyan",
    "aborted": "yellow",
    "completed_after_stop": "green",
    "completed": "green",
    "refused": "magenta",
    "failed": "red",
}


def seconds(value: float) -> str:
    """A duration people read at a glance: µs, ms or s."""
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        return f"{value * 1e3:.1f} ms"
    return f"{value:.2f} s"


def demo_report(console: Console, report: DemoReport) -> None:
    """The per-call table and the per-session stop → settle line."""
    table = Table(title="What Stop did to each call", title_justify="left")
    for col in ("session", "tool", "class", "policy", "outcome", "stop → released", "detail"):
        table.add_column(col)
    for c in report.calls:
        style = _OUTCOME_STYLE.get(c.outcome, "")
        table.add_row(c.session, c.tool, c.tool_class, c.policy, f"[{style}]{c.outcome}[/]",
                      seconds(c.stop_to_settle_s), c.detail)
    console.print(table)
    summary = Table(title="Stop → settle per session", title_justify="left")
    for col in ("session", "mode", "stop → settle", "recovered by watchdog"):
        summary.add_column(col)
    for sess, value in report.settle_s.items():
        summary.add_row(sess, report.modes[sess], seconds(value),
                        "yes" if report.recovered.get(sess) else "no")
    console.print(summary)
