"""``turnwatch explain``: one stop's timeline from the click to idle, as a waterfall, and what
still holds the session, in plain words, with the command that would recover it.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from turnwatch import names
from turnwatch.cli.shown import recover_with, show, visible
from turnwatch.cli.tables import seconds
from turnwatch.runtime.events import Event
from turnwatch.runtime.fold import Fold, Move
from turnwatch.runtime.model import RecoveryResult, SessionStatus, ToolClass
from turnwatch.tracing import view
from turnwatch.tracing.arc import Arc, read_arc
from turnwatch.tracing.rows import damaged_summaries
from turnwatch.watchdog.holds import what_holds
from turnwatch.watchdog.scan import DEFAULT_CONFIG, Config, Finding

BAR_WIDTH = 24
#: The steps of a stop, by what the event did (the fold's moves, so explain, spans and metrics
#: agree on where the stop began and which agent.abort was the stop's own).
_STEP_LABEL = {
    Move.STOP: "Stop clicked",
    Move.RPC: "agent.abort received",
    Move.WALK: "abort walk started",
    Move.SETTLED: "turn settled",
    Move.RETURNED: "agent.abort returned",
    Move.CLEARED: "processing cleared: idle",
    Move.UI_CLICK: "Stop clicked in the browser",
    Move.UI_IDLE: "idle rendered in the browser",
}


@dataclass
class ToolRow:
    """One call in the waterfall: offsets from the stop, seconds."""

    call: str
    tool: str
    tool_class: str
    policy: str
    outcome: str
    start: float | None  # tool.started
    abort: float | None  # tools.abort sent
    end: float | None  # released (None: still held)
    pid: int | None = None
    containment: str | None = None  # cgroup or process_group (tool.started)


@dataclass
class Explanation:
    """Everything ``explain`` shows, as data."""

    session: str
    turn: str
    mode: str
    state: str
    stop_at: float | None  # unix seconds of the click (or the RPC)
    steps: list[tuple[float, str, str]] = field(default_factory=list)  # offset, label, detail
    tools: list[ToolRow] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    #: Recovery would act (``what_holds``: what ``recover`` asks too), and what to say of it.
    recoverable: bool = False
    verdict: str = ""
    source: str | None = None  # who wrote the session's events (an agent CLI), when known
    #: What a reader should know of the calls that holds nothing (a process call uncontained).
    notes: list[str] = field(default_factory=list)
    #: The session whose run started this one (a nested run), and the runs this one started.
    parent: str | None = None
    children: list[str] = field(default_factory=list)
    #: The session's states as its user lived them (ready, working, waiting), in order.
    arc: Arc = field(default_factory=Arc)
    #: The turn's rows no event could be made of (``tracing.rows``), each said: left out.
    left_out: list[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        ends = [s[0] for s in self.steps] + [t.end for t in self.tools if t.end is not None]
        return max([*ends, 0.0])


def build(
    conn: sqlite3.Connection,
    session: str,
    turn: str,
    *,
    now: float | None = None,
    cfg: Config = DEFAULT_CONFIG,
    findings: Sequence[Finding] | None = None,
) -> Explanation:
    """What ``explain`` shows of ``turn``; ``findings``: a scan's the caller made already (the
    live page's, a second old at most), else one is made."""
    now = time.time() if now is None else now
    left_out: list[str] = []
    events = view.timeline(conn, session, turn, on_bad=lambda bad: left_out.append(str(bad)))
    rows = view.sessions(conn, only=session, now=now, th=cfg)
    row = rows[0] if rows else None
    # No row: none yet, or one the readers skip as damaged, whose state is then not known.
    damaged = [] if row else damaged_summaries(conn, session=session, limit=1)
    left_out += [f"{d}: a damaged row, not read" for d in damaged]
    fold = Fold()
    steps = fold.feed(events)
    stop = fold.sessions.get(session)
    stop_at = stop.stop_ts if stop is not None else None
    if stop is not None and stop.ui_click_ts is not None and stop_at is not None:
        stop_at = min(stop_at, stop.ui_click_ts)  # the browser's click, which arrived late
    t0 = stop_at if stop_at is not None else (events[0].ts_unix if events else now)
    ex = Explanation(
        session,
        turn,
        (row.mode if row else None) or "unknown",
        row.state
        if row and row.turn == turn
        else (SessionStatus.UNKNOWN if damaged else SessionStatus.IDLE),
        stop_at,
    )
    ex.source = view.producer(conn, session)
    ex.parent = stop.parent_session if stop is not None else None
    ex.children = view.children(conn, session)
    ex.arc = read_arc(conn, session)
    ex.left_out = left_out
    for st in steps:
        for move in st.moves:
            if move in _STEP_LABEL and not (
                move is Move.STOP and (Move.RPC in st.moves or Move.UI_CLICK in st.moves)
            ):
                ex.steps.append((st.ev.ts_unix - t0, _STEP_LABEL[move], _detail(st.ev)))
        if Move.ANSWER_LATE in st.moves:
            # The user answered a prompt the stop had closed, and was refused: why a write
            # they approved never ran.
            said = "approval" if st.ev.attrs.get(names.K_APPROVED) else "answer"
            ex.steps.append(
                (st.ev.ts_unix - t0, f"{said} after the stop, refused", f"call {st.ev.call}")
            )
        if Move.FINDING in st.moves or Move.RECOVERED in st.moves:
            # What the watchdog saw, and what its recovery did: steps of the turn too.
            ex.steps.append((st.ev.ts_unix - t0, *_watchdog_step(st.ev, st.moves)))
    ex.steps.sort(key=lambda step: step[0])  # a click that arrived late is still the first step

    def off(ts: float | None) -> float | None:
        return ts - t0 if ts is not None else None

    calls = [
        ToolRow(
            call=c.call,
            tool=c.tool or "?",
            tool_class=c.tool_class or "?",
            policy=c.policy or "?",
            outcome=c.outcome or view.held_phase(c.started_ts, c.prompt_open),
            start=off(c.started_ts),
            abort=off(c.abort_ts),
            end=off(c.ended_ts),
            pid=c.pid,
            containment=c.containment,
        )
        for c in fold.calls.values()
        if c.turn == turn
    ]
    ex.tools = calls
    ex.notes = [
        f"{t.tool} {t.call} ({t.tool_class}) ran uncontained: it started no command through "
        "turnwatch, so no process of it is tied to the call"
        for t in calls
        if t.tool_class == ToolClass.PROCESS.value and t.start is not None and t.pid is None
    ]
    if row is not None and row.gap_lost:
        ex.notes.append(
            f"the ledger lost {row.gap_lost} event(s) of this session (ledger.gap, the last "
            f"lost at {_clock(row.gap_ts)}): this is what was recorded"
            + (
                "; the session's state now is not known"
                if row.state is SessionStatus.UNKNOWN
                else ""
            )
        )
    last = ex.arc.steps[-1] if ex.arc.steps else None
    if last is not None and last.inferred is not None:
        ex.notes.append(
            f"the session's {last.state} is inferred ({last.inferred}): its agent CLI writes no "
            "prompt to its log"
        )
    if row is not None and row.turn == turn:
        # As recover asks it.
        hold = what_holds(conn, session, cfg=cfg, now=now, row=row, findings=findings)
        ex.findings, ex.reasons, ex.verdict = hold.findings, hold.reasons(now, cfg), hold.verdict()
        ex.recoverable = hold.recoverable
    return ex


#: How a process call's processes were kept together, in a few letters.
_KEPT = {"cgroup": "cgroup", "process_group": "group"}


#: At this width and more, explain shows every column.
WIDE = 110


def _short(call: str, turn: str) -> str:
    """A call id without its turn's prefix (``demo-adr.t1.c3`` → ``c3``): enough to tell two
    calls of the same tool apart."""
    return call[len(turn) + 1 :] if call.startswith(turn + ".") else call


def _detail(e: Event) -> str:
    parts = [
        f"{k} {e.attrs[k]}"
        for k in (names.K_SOURCE, names.K_OUTCOME, names.K_INFLIGHT, names.K_RECEIPT)
        if k in e.attrs
    ]
    if e.attrs.get(names.K_SETTLED_BY):
        parts.append(f"by {e.attrs[names.K_SETTLED_BY]}")
    if names.K_REASON in e.attrs:  # why an agent CLI's turn ended
        parts.append(f"reason {e.attrs[names.K_REASON]}")
    ran = e.attrs.get(names.K_DURATION_MS)
    if isinstance(ran, int | float):  # how long the turn ran, as an agent CLI logged it
        parts.append(f"ran {seconds(ran / 1000)}")
    return ", ".join(parts)


def _watchdog_step(e: Event, moves: tuple[Move, ...]) -> tuple[str, str]:
    """A watchdog's own step in a turn (its finding, its recovery's end: the fold's moves) as a
    label and its detail. Each is recorded once (a finding once per key)."""
    if Move.FINDING in moves:
        finding = e.attrs.get(names.K_FINDING, "?")
        return f"watchdog found {finding}", str(e.attrs.get(names.K_DETAIL, ""))
    result = e.attrs.get(names.K_RESULT)
    label = "watchdog recovered" if result == RecoveryResult.OK else f"watchdog recovery {result}"
    keys = (names.K_RESULT, names.K_RECEIPT, names.K_ERROR)
    parts = [str(e.attrs[names.K_ACTION])] if names.K_ACTION in e.attrs else []
    return label, ", ".join(parts + [f"{k} {e.attrs[k]}" for k in keys if k in e.attrs])


def _offset(x: float) -> str:
    """An offset from the stop, signed: a call released before the click shows ``-10.0 ms``."""
    return ("+" if x >= 0 else "-") + seconds(abs(x))


def _bar(t: ToolRow, total: float, width: int = BAR_WIDTH) -> Text:
    """``░`` while the call ran unaware of the stop, ``█`` from tools.abort to its release."""

    def col(x: float) -> int:
        return min(width, max(0, round(x / total * width)))

    if t.start is None:
        return Text("✕ never began" if width >= 13 else "✕", style="magenta")
    # Each part at least one character, and the whole within ``width``: a bar one too wide is
    # cut at its end, and the end is the stop's █.
    start = min(col(max(t.start, 0.0)), width - 1)
    end = col(t.end) if t.end is not None else width
    bar = Text(" " * start)
    if t.abort is None:  # never reached by the stop
        return bar + Text("░" * max(end - start, 1), style="red")
    abort = min(max(col(t.abort), start), width - 1)
    bar += Text("░" * (abort - start), style="red")
    return bar + Text("█" * max(end - abort, 1), style="red" if t.end is None else "green")


def render(console: Console, ex: Explanation, ledger_hint: str = "") -> None:
    """The waterfall, the steps, the reasons and the recover command."""
    total = max(ex.total, 1e-6)
    stopped = ex.stop_at is not None
    head = Text.assemble(
        ("Stop of turn " if stopped else "Turn ", "bold"),
        (visible(ex.turn), "bold cyan"),
        ("  session ", ""),
        (visible(ex.session), "cyan"),
        (f"  {ex.source}  " if ex.source and ex.mode == "unknown" else f"  mode {ex.mode}  ", ""),
        (ex.state, "bold red" if ex.state == SessionStatus.PINNED else "green"),
    )
    tree = []
    if ex.parent:
        tree.append(Text.assemble(("nested run of session ", "dim"), (visible(ex.parent), "cyan")))
    if ex.children:
        tree.append(
            Text.assemble(("nested runs: ", "dim"), (visible(", ".join(ex.children)), "cyan"))
        )
    walk = Table(box=None, show_header=True, pad_edge=False)
    for col in ("offset", "step", ""):
        walk.add_column(col)
    for off, label, detail in ex.steps:
        walk.add_row(_offset(off), label, Text(visible(detail), style="dim"))
    # No stop's steps to draw: say so (the calls are timed from the turn's start); what the
    # watchdog found in the turn is still drawn.
    never = Text("never stopped: no stop reached this turn", style="dim")
    steps = walk if stopped else (Group(never, walk) if ex.steps else never)
    # At 80 columns the class and the containment go (the policy says what a stop did), and the
    # bar narrows; nothing a reader needs is cut to an ellipsis.
    wide = console.width >= WIDE
    bar_w = BAR_WIDTH if wide else max(8, min(BAR_WIDTH, console.width - 70))
    wf = Table(box=None, show_header=True, pad_edge=False)
    wf.add_column("call", overflow="fold", max_width=None if wide else 22)
    if wide:
        wf.add_column("class", no_wrap=True)
    wf.add_column("policy", no_wrap=True)
    if wide:
        wf.add_column("kept", no_wrap=True)
    wf.add_column("outcome", no_wrap=True)
    wf.add_column("released", no_wrap=True, min_width=10)
    wf.add_column("timeline", no_wrap=True, min_width=bar_w, max_width=bar_w)
    for t in ex.tools:
        released = Text(_offset(t.end)) if t.end is not None else Text("still held", "bold red")
        # Names as recorded, as Text: a str cell is read as markup (a tool ``[x]Grep`` is shown
        # as ``Grep``).
        cells = [Text.assemble(visible(t.tool), " ", (visible(_short(t.call, ex.turn)), "dim"))]
        kept = _KEPT.get(t.containment or "", "-")
        cells += [
            Text(visible(c)) for c in ((t.tool_class, t.policy, kept) if wide else (t.policy,))
        ]
        wf.add_row(*cells, Text(visible(t.outcome)), released, _bar(t, total, bar_w))
    legend = Text("timeline: ░ ran unaware of the stop  █ stopping  ✕ never began", style="dim")
    parts: list[object] = [head, *tree, Text(""), steps, Text(""), wf, legend]
    parts += _arc(ex)
    parts += [Text(f"note: {visible(n)}", style="yellow") for n in ex.notes]
    if ex.reasons:
        parts += [Text(""), Text("What still holds the session:", style="bold red")]
        bullets = Table.grid(padding=(0, 1))  # a hanging indent: wrapped lines stay under the text
        bullets.add_column(no_wrap=True)
        bullets.add_column()
        for r in ex.reasons:
            bullets.add_row(" •", Text(visible(r)))
        parts.append(bullets)
    console.print(Panel(Group(*parts), title="turnwatch explain", expand=False))  # type: ignore[arg-type]
    if ex.recoverable:  # outside the panel, unwrapped: people copy and paste it
        recover_with(console, ex.verdict + ledger_hint)
    elif ex.reasons:
        show(console, ex.verdict, soft_wrap=True)


#: explain draws this many of an arc's last states (``--json`` has them all).
ARC_SHOWN = 12
_ARC_STYLE = {"ready": "green", "working": "yellow", "waiting": "bold magenta"}


def _arc(ex: Explanation) -> list[object]:
    """An agent-CLI session's states as its user lived them: when, which, moved by what (a
    runtime's session has the stop's steps; its arc is in ``--json`` and on the page)."""
    if ex.source not in names.AGENT_CLI_SOURCES or not ex.arc.steps:
        return []
    arc = ex.arc
    t = Table(box=None, show_header=True, pad_edge=False, title_justify="left")
    t.title = f"States ({arc.stops} stop{'' if arc.stops == 1 else 's'})"
    for col in ("since", "state", "moved by"):
        t.add_column(col, no_wrap=col != "moved by")
    shown = arc.steps[-ARC_SHOWN:]
    if arc.cut or len(shown) < len(arc.steps):
        t.add_row("…", Text("earlier states left out", style="dim"), "")
    for step in shown:
        why = step.event + (f" (inferred: {step.inferred})" if step.inferred else "")
        t.add_row(
            _clock(step.since),
            Text(step.state, style=_ARC_STYLE.get(step.state, "")),
            Text(visible(why), style="dim"),
        )
    return [Text(""), t]


def _clock(ts: float | None) -> str:
    return "?" if ts is None else datetime.fromtimestamp(ts).isoformat(sep=" ", timespec="seconds")
