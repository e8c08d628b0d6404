"""The message boundary between the runtime and the host that runs tools.

The runtime only ever sends typed ``tools.execute`` and ``tools.abort`` requests and receives typed
results and progress, so a host can live in another process behind a pipe or socket. The local host
(:mod:`turnwatch.runtime.host`) is one implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from turnwatch.runtime.model import Signalled, StopSource, ToolClass


@dataclass(frozen=True, slots=True)
class ExecuteRequest:
    """``tools.execute``: run one call."""

    session: str
    turn: str
    call_id: str
    tool: str
    tool_class: ToolClass
    args: Mapping[str, Any] = field(default_factory=dict)
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class AbortRequest:
    """``tools.abort``: typed, so it can only ever match the call it names."""

    session: str
    turn: str
    call_id: str
    tool: str
    source: StopSource
    grace_s: float  # the runtime's window; the host must have answered before it ends
    traceparent: str | None = None
    #: When the runtime's window ends (``time.monotonic()``; None on a test's manual clock): the
    #: host's own window is counted from the runtime's start, not from when the message
    #: arrived, so a busy loop's delivery delay cannot push the host's answer past it.
    deadline: float | None = None


@dataclass(frozen=True, slots=True)
class TurnAbortRequest:
    """The turn's stop, for what outlives its calls: processes a finished process call left
    running (``cmd &``). They belong to the call, so the turn's stop ends them too."""

    session: str
    turn: str
    source: StopSource
    grace_s: float


@dataclass(frozen=True, slots=True)
class Reaped:
    """What a turn's stop ended of one finished call's lingering processes."""

    call_id: str
    tool: str
    gone: tuple[int, ...]
    by: Signalled
    survivors: tuple[int, ...] = ()


class HostStatus(StrEnum):
    """How the host says a call ended."""

    OK = "ok"
    ERROR = "error"
    ABORTED = "aborted"  # stopped; output holds what was collected before termination
    CANCELLED_BY_SERVER = "cancelled_by_server"  # an extension answered the cancel with an error


@dataclass(frozen=True, slots=True)
class HostResult:
    """The host's answer to ``tools.execute``."""

    status: HostStatus
    output: str = ""
    data: Mapping[str, Any] | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Started:
    """The host started the call's side effect; process tools name their process."""

    pid: int | None = None
    create_time: float | None = None
    #: The same start as the kernel keeps it (:func:`turnwatch.runtime.procfs.start_attrs`):
    #: clock ticks since boot, and the boot's id. A clock step moves ``create_time``, not these.
    start_ticks: int | None = None
    boot_id: str | None = None
    #: How its processes are kept together: ``cgroup`` or ``process_group``.
    containment: str | None = None
    #: The call's cgroup directory, in ``cgroup`` containment.
    cgroup: str | None = None
    #: That directory's inode number: the cgroup itself, not whatever is at its path later.
    cgroup_id: int | None = None
    #: What the containment cannot catch (``process_group`` mode names its known holes).
    holes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Progress:
    """Output or a progress notification: the call's heartbeat."""

    text: str = ""
    progress: float | None = None
    total: float | None = None


HostMessage = Started | Progress
MessageCallback = Callable[[HostMessage], None]


class Host(Protocol):
    """Runs tools. ``execute`` may report :class:`Started` and :class:`Progress` via ``notify``."""

    async def execute(self, request: ExecuteRequest, notify: MessageCallback) -> HostResult:
        """Run the call and return its result (also when it was aborted)."""
        ...

    def abort(self, request: AbortRequest) -> None:
        """Send ``tools.abort``: returns at once (a message is sent), never when the call ends.

        Synchronous on purpose: the abort walk sends one per in-flight call and must stay cheap.
        """
        ...

    async def abort_turn(self, request: TurnAbortRequest) -> Sequence[Reaped]:
        """End what the turn's finished calls left running, within the grace window."""
        ...
