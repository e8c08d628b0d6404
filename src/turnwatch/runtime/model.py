"""The domain: tool classes and their abort policies, call phases, modes, stop sources."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from turnwatch import names

#: The grace window a stopped process call gets before SIGKILL (ADR), seconds.
DEFAULT_GRACE_S = 10.0


class ToolClass(StrEnum):
    """What a tool can do to the world, which fixes what a stop may do to it."""

    READ_ONLY = "read_only"
    PROCESS = "process"
    MUTATING = "mutating"
    EXTENSION = "extension"


class Policy(StrEnum):
    """How a stop treats a call that already started (design §1)."""

    RACE = "race"  # end the wait at once, discard the result
    GRACE = "grace"  # terminate, wait a bounded window for collected output
    AWAIT = "await"  # request cancellation, wait for the host's result however long


POLICY_OF: Mapping[ToolClass, Policy] = {
    ToolClass.READ_ONLY: Policy.RACE,
    ToolClass.PROCESS: Policy.GRACE,
    ToolClass.MUTATING: Policy.AWAIT,
    ToolClass.EXTENSION: Policy.AWAIT,
}

BUILTIN_CLASSES: Mapping[str, ToolClass] = {
    "Read": ToolClass.READ_ONLY,
    "Glob": ToolClass.READ_ONLY,
    "Grep": ToolClass.READ_ONLY,
    "Bash": ToolClass.PROCESS,
    "GenerateImages": ToolClass.PROCESS,
    "Write": ToolClass.MUTATING,
    "Edit": ToolClass.MUTATING,
}


def class_of(tool: str, declared: str | None = None) -> ToolClass:
    """The class of ``tool``: built-in, else the declared one, else ``extension`` (design §3)."""
    if tool in BUILTIN_CLASSES:
        return BUILTIN_CLASSES[tool]
    if declared is not None:
        # A dict lookup first: calling the enum costs a microsecond, and every stage of the
        # ledger writer asks this for every requested call.
        return _CLASS_BY_VALUE.get(declared) or ToolClass(declared)
    return ToolClass.EXTENSION


_CLASS_BY_VALUE: Mapping[str, ToolClass] = {c.value: c for c in ToolClass}


class Phase(StrEnum):
    """Where a call is: ``queued → awaiting_permission → admitted → running → terminal``."""

    QUEUED = "queued"
    AWAITING_PERMISSION = "awaiting_permission"
    ADMITTED = "admitted"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    ABORTED = "aborted"
    DISCARDED = "discarded"

    @property
    def started(self) -> bool:
        """True once the host was asked to execute (the side-effect boundary)."""
        return self in _STARTED

    @property
    def terminal(self) -> bool:
        """True when the runtime holds nothing more for this call."""
        return self in _TERMINAL


_TERMINAL = frozenset({Phase.FINISHED, Phase.FAILED, Phase.ABORTED, Phase.DISCARDED})
_STARTED = frozenset({Phase.RUNNING})


class Mode(StrEnum):
    """Stop behaviour: the ADR's, or one it rejected or replaced (for comparison)."""

    ADR = "adr"
    LEGACY = "legacy"  # only Bash/GenerateImages listen; abort() relies on the signal alone
    ABANDON_ALL = "abandon_all"  # every call locally abandoned; prompts stay open (rejected)
    GRACE_ONLY = "grace_only"  # every call waits one grace window, then is abandoned (rejected)


class StopSource(StrEnum):
    """Who stopped the turn."""

    UI = "ui"
    KEYBOARD = "keyboard"
    API = "api"
    CLI = "cli"
    WATCHDOG = "watchdog"
    #: The framework's own cancel of a wrapped run (a user's token, ``RunContext.cancel()``,
    #: the SDK's ``cancel()``), or the agent loop's own end: it raised while calls of its turn
    #: ran (``Turn.finish(FAILED)``), and the turn is then recorded ``failed``.
    FRAMEWORK = "framework"
    #: The task running a wrapped run was cancelled from outside (``wait_for``, a task group,
    #: Ctrl-C), or its reader left a streamed run before its end (a ``break``).
    CANCEL = "cancel"


class Receipt(StrEnum):
    """What ``abort()`` did."""

    ACCEPTED = "accepted"  # this stop started the walk and saw the turn settle
    JOINED = "joined"  # a stop was already under way; this one joined its settlement
    ALREADY_SETTLED = "already_settled"  # the turn had settled before this stop
    STALE = "stale"  # no live turn (unknown or finished turn)


class Outcome(StrEnum):
    """How a call ended, as the runtime reports it."""

    COMPLETED = "completed"
    FAILED = "failed"
    ABORTED = "aborted"  # TOOL_ABORTED: stopped before it finished
    DISCARDED = "discarded"  # raced: the wait ended at the stop, the result is dropped
    REFUSED = "refused"  # requested after the stop, never started
    DENIED = "denied"  # the permission was denied
    COMPLETED_AFTER_STOP = "completed_after_stop"  # awaited; finished after cancel was asked
    LOST_WITH_RUNTIME = "lost_with_runtime"  # ran inside a runtime that died (watchdog's record)


class RecoveryResult(StrEnum):
    """What a watchdog recovery came to (``watchdog.recovered``'s ``attrs.result``)."""

    OK = "ok"
    FAILED = "failed"  # tried, and something is still held (named in ``error``/``survivors``)
    REFUSED = "refused"  # not tried: the target failed the identity checks
    SKIPPED = "skipped"  # nothing to do: already gone, already empty
    # Never recorded, only returned: what a dry run would do, what is reported only, and what
    # waits (the rate limit, or the back-off after a failure): the finding stands.
    DRY_RUN = "dry_run"
    REPORT_ONLY = "report_only"
    DEFERRED = "deferred"


#: The results ``watchdog.recovered`` records, each a series of the recoveries counter.
RECORDED_RESULTS = (RecoveryResult.OK, RecoveryResult.FAILED, RecoveryResult.REFUSED)


class Signalled(StrEnum):
    """The last signal a termination needed (``process.reaped``'s ``attrs.signal``)."""

    SIGTERM = "SIGTERM"
    SIGKILL = "SIGKILL"
    NONE = "none"  # nothing was left to signal


class FindingKind(StrEnum):
    """What a watchdog finding says holds a session (design §6; the names are ``names.F_*``)."""

    ABORTED_WITH_LIVE_PROCESS = names.F_ABORTED_WITH_LIVE_PROCESS
    PINNED_SESSION = names.F_PINNED_SESSION
    ABORT_RPC_STUCK = names.F_ABORT_RPC_STUCK
    ORPHAN_TOOL_PROCESS = names.F_ORPHAN_TOOL_PROCESS
    AWAIT_OVERDUE = names.F_AWAIT_OVERDUE
    ACTIVITY_AFTER_SETTLE = names.F_ACTIVITY_AFTER_SETTLE
    PERMISSION_AFTER_STOP = names.F_PERMISSION_AFTER_STOP
    BACKGROUND_PROCESS = names.F_BACKGROUND_PROCESS
    DANGLING_TOOL_CALLS = names.F_DANGLING_TOOL_CALLS


class SessionStatus(StrEnum):
    """A session's state as ``sessions`` shows it (the names are ``names.STATE_*``)."""

    IDLE = names.STATE_IDLE
    PROCESSING = names.STATE_PROCESSING
    STOPPING = names.STATE_STOPPING
    PINNED = names.STATE_PINNED
    #: The ledger lost events of the session after its last known turn began (``ledger.gap``).
    UNKNOWN = names.STATE_UNKNOWN


class TurnOutcome(StrEnum):
    """``turn.settled``'s ``attrs.outcome``."""

    COMPLETED = "completed"
    ABORTED = "aborted"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a call produced, as the runtime hands it to the agent loop."""

    call_id: str
    tool: str
    outcome: Outcome
    output: str = ""
    error_code: str | None = None  # names.TOOL_ABORTED when stopped
    data: Mapping[str, Any] | None = None
    #: Why it failed, in words the agent loop can pass on (the host's, or the exception's).
    error: str | None = None

    @property
    def aborted(self) -> bool:
        """True when the agent loop must treat the call as ``TOOL_ABORTED``."""
        return self.error_code == names.TOOL_ABORTED


class TurnwatchError(Exception):
    """Base of turnwatch's errors."""


class UnknownSessionError(TurnwatchError, LookupError):
    """A session id the runtime does not know; the message names the ones it does."""


class UnknownTurnError(TurnwatchError, LookupError):
    """A turn id that is not the session's; the message names the ones it has."""


class CallIdReusedError(TurnwatchError, ValueError):
    """A call id already used in this session: new turns must use new ids."""


class TurnBusyError(TurnwatchError, RuntimeError):
    """The session already has a live turn."""


class ParentStoppedError(TurnwatchError, RuntimeError):
    """A nested run asked for by a tool of a turn whose stop already began: it never starts
    (a stopped call starts nothing), as a call requested after the stop is refused."""


def parse_source(source: str | StopSource) -> StopSource:
    """``source`` as a :class:`StopSource`, or a ValueError naming the valid ones."""
    try:
        return StopSource(source)
    except ValueError:
        valid = ", ".join(s.value for s in StopSource)
        raise ValueError(f"invalid stop source {source!r}; valid sources: {valid}") from None


#: A W3C ``traceparent`` header of version 00, as a browser's click or a framework's run sends it.
TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


def parse_traceparent(traceparent: str) -> str:
    """``traceparent`` if it is a W3C ``traceparent`` (version 00), else a ValueError saying
    what one looks like."""
    if not TRACEPARENT.fullmatch(traceparent):
        raise ValueError(
            f"bad traceparent {traceparent!r}: want 00-<32 hex trace id>-<16 hex span id>-<2 hex>"
        )
    return traceparent


class PastCalls(Protocol):
    """What runtimes before this one recorded of their calls (a ledger's, for one:
    :class:`turnwatch.tracing.past_calls.LedgerCalls`), read by a runtime after a restart."""

    def resolved(self, session: str, call: str) -> bool:
        """True if ``call`` of ``session`` was recorded resolved: a prompt it had was answered
        or closed by a stop, and no answer can start it any more."""
        ...

    # Optional (a ``past=`` without it numbers a session's turns from 1, as before):
    #
    # def last_turn(self, session: str) -> int:
    #     """N of the latest numbered turn (``{session}.tN``) recorded of ``session``; the
    #     runtime numbers its turns of a session it serves again on from there (0: none)."""
