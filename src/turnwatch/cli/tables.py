"""Rich rendering of what the library returns; no logic of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from turnwatch.cli.shown import visible
from turnwatch.runtime.model import SessionStatus
from turnwatch.tracing.ages import age, ago  # noqa: F401 - age: still importable from here

if TYPE_CHECKING:  # the demo pulls in the MCP SDK: a table of sessions must not
    from turnwatch.cli.demo.scenario import DemoReport
    from turnwatch.tracing.view import SessionView

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


#: Below this many columns, the per-call table becomes a list (nothing is cut off).
WIDE = 110


def _demo_calls_narrow(console: Console, report: DemoReport) -> None:
    """Two lines per call: what it was and how it ended, then the detail, wrapped."""
    console.print("[bold]What Stop did to each call[/]  (class/policy, outcome, stop → released)")
    session = None
    for c in report.calls:
        if c.session != session:
            session = c.session
            console.print(f"[bold]{session}[/]")
        style = _OUTCOME_STYLE.get(c.outcome, "")
        released = seconds(c.stop_to_release_s) if c.stop_to_release_s is not None else "-"
        console.print(
            f"  {c.tool:<26} {c.tool_class + '/' + c.policy:<16} "
            f"[{style}]{c.outcome:<20}[/] {released:>9}",
            highlight=False,
        )
        if c.detail:
            console.print(f"      [dim]{c.detail}[/]", highlight=False)


def demo_report(console: Console, report: DemoReport) -> None:
    """The per-call table and the per-session stop → settle line."""
    if console.width < WIDE:
        _demo_calls_narrow(console, report)
    else:
        _demo_calls_table(console, report)
    _demo_sessions(console, report)


def _demo_calls_table(console: Console, report: DemoReport) -> None:
    table = Table(title="What Stop did to each call", title_justify="left")
    for col in ("session", "tool", "class", "policy", "outcome", "stop → released"):
        table.add_column(col, no_wrap=True)
    table.add_column("detail")
    for c in report.calls:
        style = _OUTCOME_STYLE.get(c.outcome, "")
        table.add_row(
            c.session,
            c.tool,
            c.tool_class,
            c.policy,
            f"[{style}]{c.outcome}[/]",
            seconds(c.stop_to_release_s) if c.stop_to_release_s is not None else "-",
            c.detail,
        )
    console.print(table)


def _demo_sessions(console: Console, report: DemoReport) -> None:
    summary = Table(title="Stop → settle per session", title_justify="left")
    for col in ("session", "mode", "stop → settle", "recovered by watchdog"):
        summary.add_column(col)
    for sess, value in report.settle_s.items():
        summary.add_row(
            sess, report.modes[sess], seconds(value), "yes" if report.recovered.get(sess) else "no"
        )
    console.print(summary)
    console.print(
        f"A late approval of the closed Write prompt was: [bold]{report.late_approval}[/]"
    )
    left = report.leftover_pids
    console.print(
        "Tool processes left behind: " + (", ".join(map(str, left)) if left else "[green]none[/]")
    )
    if report.ledger:
        console.print(f"Ledger: {report.ledger}", soft_wrap=True)
        # Its own line, never broken: people copy it.
        console.print(
            f"Try: turnwatch explain demo-legacy --ledger {report.ledger}", soft_wrap=True
        )


_STATE_STYLE = {
    SessionStatus.IDLE: "green",
    SessionStatus.PROCESSING: "cyan",
    SessionStatus.STOPPING: "yellow",
    SessionStatus.PINNED: "bold red",
    SessionStatus.UNKNOWN: "magenta",
}


def sessions_table(console: Console, rows: list[SessionView]) -> None:
    """``turnwatch sessions``: a table where it fits, else a block per session; an id is never
    cut (an id that cannot be copied into ``explain`` is useless)."""
    if not rows:
        console.print("no sessions in this ledger")
        return
    cells = [_session_cells(r) for r in rows]
    heads = ("session", "state", "turn", "since", "mode", "live", "findings")
    widths = [
        max(len(h), *(len(Text.from_markup(c[i]).plain) for c in cells))
        for i, h in enumerate(heads)
    ]
    if sum(widths) + 3 * len(widths) + 1 > console.width:
        for r, c in zip(rows, cells, strict=True):
            _session_block(console, r, c)
        return
    table = Table(title_justify="left")
    for col in heads:
        table.add_column(col, no_wrap=col in ("session", "turn"))
    for c in cells:
        table.add_row(*c)
    console.print(table)


def _session_cells(r: SessionView) -> list[str]:
    style = _STATE_STYLE.get(r.state, "")
    return [
        escape(visible(r.session)),
        f"[{style}]{r.state}[/]",
        escape(visible(r.turn or "-")),
        ago(r.since),
        escape(visible(r.mode or r.source or "unknown")),
        str(r.live_processes) if r.live_processes else "-",
        escape(visible(", ".join([*r.findings, *gap_words(r)]) or "-")),
    ]


def _session_block(console: Console, r: SessionView, c: list[str]) -> None:
    """One session, stacked: each id whole on its own line (soft-wrapped, never cut)."""
    console.print(f"[bold]{c[0]}[/]", soft_wrap=True)
    console.print(f"  {c[1]}  since {c[3]}  {c[4]}  live {c[5]}", soft_wrap=True)
    console.print(f"  turn {c[2]}", soft_wrap=True)
    if c[6] != "-":
        console.print(f"  findings {c[6]}", soft_wrap=True)


def gap_words(r: SessionView) -> list[str]:
    """What the ledger lost of the session's history, as ``sessions`` and ``explain`` say it."""
    return [f"ledger gap: {r.gap_lost} event(s) lost"] if r.gap_lost else []
