"""What holds a session, and whether recovering it would do anything: one answer.

``explain`` draws it, ``recover`` acts on it: both ask :func:`what_holds`, so they cannot
disagree (explain once said "Recover with …" where recover found nothing to do). A session is
held by the watchdog's findings, which recovery acts on, and by calls its turn still waits for
that no finding covers yet (a mutating call running: the turn cannot settle before it returns,
and nothing may end it).
"""

from __future__ import annotations

import shlex
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from turnwatch.runtime.model import FindingKind, SessionStatus
from turnwatch.tracing import view
from turnwatch.tracing.ages import age
from turnwatch.tracing.view import SessionView
from turnwatch.watchdog.scan import DEFAULT_CONFIG, Config, Finding, scan


@dataclass(frozen=True)
class Waiting:
    """A call the session's turn waits for, that no finding covers."""

    tool: str
    call: str
    tool_class: str
    prompt: bool = False  # it waits on its user's answer to a permission prompt

    def reason(self) -> str:
        if self.prompt:
            return (
                f"{self.tool} {self.call} ({self.tool_class}) waits for its user to answer a "
                "permission prompt; the turn cannot settle before the answer or a stop"
            )
        return (
            f"{self.tool} {self.call} ({self.tool_class}) has not returned; the turn cannot "
            "settle before it does"
        )


def recover_command(session: str, *options: str) -> str:
    """``turnwatch recover`` of ``session`` as a line to paste: quoted as a shell reads it (an
    id ``[x]p1`` is a glob to a shell, a path with a space two words)."""
    return shlex.join(["turnwatch", "recover", session, *options])


@dataclass
class Hold:
    """What holds one session now."""

    session: str
    findings: list[Finding] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)

    @property
    def recoverable(self) -> bool:
        """Recovery would act (each finding is one action of the walk)."""
        return bool(self.findings)

    @property
    def held(self) -> bool:
        return bool(self.findings or self.waiting)

    def reasons(self, now: float, cfg: Config = DEFAULT_CONFIG) -> list[str]:
        """One line per thing holding the session, findings first."""
        return [reason(f, now, cfg) for f in self.findings] + [w.reason() for w in self.waiting]

    def verdict(self) -> str:
        """The line that ends what a command says of it."""
        if self.recoverable:
            return recover_command(self.session)
        if self.waiting and all(w.prompt for w in self.waiting):
            return (
                f"nothing to recover in session {self.session}: it waits for its user to "
                "answer a permission prompt"
            )
        if self.waiting:
            return (
                f"nothing to recover in session {self.session} yet: it waits for a call that "
                "has not returned (the watchdog finds it once it is overdue)"
            )
        return f"nothing holds session {self.session}"


def what_holds(
    conn: sqlite3.Connection,
    session: str,
    *,
    cfg: Config = DEFAULT_CONFIG,
    now: float | None = None,
    findings: Sequence[Finding] | None = None,
    row: SessionView | None = None,
) -> Hold:
    """What holds ``session``: the findings (the watchdog's, if given, else one scan's) and the
    calls of its live turn that have not returned and no finding covers (``row``: the
    session's view, if the caller has read it already)."""
    now = time.time() if now is None else now
    if findings is None:
        findings = scan(conn, cfg=cfg, now=now).findings
    hold = Hold(session, [f for f in findings if f.session == session])
    if row is None:
        rows = view.sessions(conn, only=session, now=now, th=cfg)
        row = rows[0] if rows else None
    if row is None or row.state is SessionStatus.IDLE:
        return hold
    covered = {f.call for f in hold.findings}
    hold.waiting = [
        Waiting(c.tool or "?", c.call, c.tool_class or "?", c.prompt_open)
        for c in row.calls
        if c.turn == row.turn
        and c.ended_ts is None
        and (c.started_ts is not None or c.prompt_open)
        and c.call not in covered
    ]
    return hold


def reason(f: Finding, now: float, cfg: Config = DEFAULT_CONFIG) -> str:
    """What a finding says of the session it holds, in words."""
    if f.kind == FindingKind.ABORTED_WITH_LIVE_PROCESS:
        late = now - (f.since or now) - cfg.grace_s
        return (
            f"{f.tool} pid {f.pid} still alive {age(late)} after the grace window; "
            "it ignores SIGTERM"
        )
    if f.cgroup is not None or f.lingering:
        return f"{f.detail} ({f.action})"
    if f.kind == FindingKind.ORPHAN_TOOL_PROCESS:
        return f"{f.tool} pid {f.pid} outlived its runtime, which is gone"
    if f.kind == FindingKind.PINNED_SESSION:
        return f'the session is pinned "processing" for {age(now - (f.since or now))}: {f.detail}'
    if f.kind == FindingKind.ABORT_RPC_STUCK:
        return f"agent.abort never returned: {f.detail}"
    if f.kind == FindingKind.DANGLING_TOOL_CALLS:
        return f"{f.kind}: the LangGraph thread's checkpoint has {f.detail}"
    return f.detail or f.kind
