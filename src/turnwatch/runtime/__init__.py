"""The ADR's stop semantics as an asyncio library.

Read-only tools race and are discarded, process tools get a bounded grace window, mutating and
extension calls are awaited, pending permissions are cancelled before they can be approved, and
``abort()`` walks the in-flight calls itself.
"""

from turnwatch.runtime.control import ControlServer
from turnwatch.runtime.events import Event, EventSink, FanOut, MemorySink
from turnwatch.runtime.gate import Answer
from turnwatch.runtime.host import LocalHost
from turnwatch.runtime.model import (
    BUILTIN_CLASSES,
    POLICY_OF,
    CallIdReusedError,
    Mode,
    Outcome,
    Phase,
    Policy,
    Receipt,
    StopSource,
    ToolClass,
    ToolResult,
    TurnBusyError,
    TurnOutcome,
    TurnwatchError,
    UnknownSessionError,
    UnknownTurnError,
    class_of,
)
from turnwatch.runtime.protocol import (
    AbortRequest,
    ExecuteRequest,
    Host,
    HostResult,
    HostStatus,
    Progress,
    Started,
)
from turnwatch.runtime.registry import AbortRecord, AbortRegistry
from turnwatch.runtime.runtime import DEFAULT_GRACE_S, Runtime
from turnwatch.runtime.session import CallHandle, Session, Turn

__all__ = [
    "BUILTIN_CLASSES",
    "DEFAULT_GRACE_S",
    "POLICY_OF",
    "AbortRecord",
    "AbortRegistry",
    "AbortRequest",
    "Answer",
    "CallHandle",
    "CallIdReusedError",
    "ControlServer",
    "Event",
    "EventSink",
    "ExecuteRequest",
    "FanOut",
    "Host",
    "HostResult",
    "HostStatus",
    "LocalHost",
    "MemorySink",
    "Mode",
    "Outcome",
    "Phase",
    "Policy",
    "Progress",
    "Receipt",
    "Runtime",
    "Session",
    "Started",
    "StopSource",
    "ToolClass",
    "ToolResult",
    "Turn",
    "TurnBusyError",
    "TurnOutcome",
    "TurnwatchError",
    "UnknownSessionError",
    "UnknownTurnError",
    "class_of",
]
