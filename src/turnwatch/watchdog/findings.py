"""What the watchdog finds (design §6): a :class:`Finding` and the :class:`Action` it calls
for, one scan's :class:`ScanResult`, and the thresholds it is found by (:class:`Config`). The
scan itself is :mod:`turnwatch.watchdog.scan`, which exports these names too."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from turnwatch.runtime.model import DEFAULT_GRACE_S, FindingKind
from turnwatch.runtime.procfs import ProcessTable
from turnwatch.tracing.view import CallView, Thresholds

__all__ = ["DEFAULT_CONFIG", "SLACK_S", "Action", "Config", "Finding", "ScanResult"]

SLACK_S = 2.0


@dataclass(frozen=True)
class Config(Thresholds):
    """The view's thresholds, plus the watchdog's own (seconds).

    Defaults: the grace window + 2 s for a live process or a silent awaited call; 15 s for a
    pending abort RPC.
    """

    grace_s: float = DEFAULT_GRACE_S
    slack_s: float = SLACK_S
    await_overdue_s: float | None = None  # default: grace + slack

    @property
    def past_grace_s(self) -> float:
        return self.grace_s + self.slack_s

    @property
    def overdue_s(self) -> float:
        return self.await_overdue_s if self.await_overdue_s is not None else self.past_grace_s


DEFAULT_CONFIG = Config()


class Action(StrEnum):
    """What a finding calls for: the closed set ``recover`` acts on and ``--json`` reports."""

    ABORT_WALK = "abort walk"  # the ADR's walk: in process, by control socket, or by the handlers
    TERMINATE = "terminate"  # SIGTERM, the grace window, SIGKILL: proven pids only
    CGROUP_KILL = "cgroup.kill"  # the call's cgroup: membership is the proof
    REPORT = "report"  # nothing the watchdog may do: people decide
    REPORT_AWAITED = "report (never abandoned)"  # a mutating or extension call: never signalled
    ANSWER_CALLS = "answer calls"  # a LangGraph thread's unanswered calls, in its checkpoint


@dataclass(frozen=True)
class Finding:
    """One thing that still holds a session, and what recovery would do about it."""

    kind: FindingKind
    session: str
    turn: str | None
    call: str | None = None
    tool: str | None = None
    pid: int | None = None
    create_time: float | None = None
    since: float | None = None
    detail: str = ""
    action: Action = Action.REPORT
    policy: str | None = None  # the call's policy: only ``grace`` calls are ever signalled
    cgroup: str | None = None  # the call's cgroup: its membership is the proof, cgroup.kill the end
    cgroup_id: int | None = None  # its inode number as recorded: still that cgroup, not a new one
    lingering: tuple[tuple[int, float], ...] = ()  # processes the call left running (pid, start)

    @classmethod
    def about(
        cls,
        c: CallView,
        kind: FindingKind,
        session: str,
        *,
        since: float | None = None,
        detail: str = "",
        action: Action = Action.REPORT,
    ) -> Finding:
        """A finding about the recorded call ``c``: its identity and containment, by name."""
        return cls(
            kind,
            session,
            c.turn,
            call=c.call,
            tool=c.tool,
            pid=c.pid,
            create_time=c.create_time,
            since=since,
            detail=detail,
            action=action,
            policy=c.policy,
            cgroup=c.cgroup,
            cgroup_id=c.cgroup_id,
            lingering=tuple(c.lingering),
        )

    @property
    def key(self) -> tuple[str, str, str | None, int | None]:
        """Identity across scans: a finding is reported once, not every interval."""
        return (self.kind, self.session, self.call or self.turn, self.pid)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "session": self.session,
            "turn": self.turn,
            "call": self.call,
            "tool": self.tool,
            "pid": self.pid,
            "since": self.since,
            "detail": self.detail,
            "action": self.action.value,
            "cgroup": self.cgroup,
        }


@dataclass
class ScanResult:
    """One scan: its findings, and the process table it joined against."""

    findings: list[Finding] = field(default_factory=list)
    table: ProcessTable | None = None
    duration_s: float = 0.0
    #: Why the ledger could not be read (a loop's scan goes on without it), or None.
    unread: str | None = None
    #: Rows of processing sessions the scan skipped as damaged (``tracing.rows``), said.
    damaged: list[str] = field(default_factory=list)
