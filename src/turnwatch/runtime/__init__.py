"""The ADR's stop semantics as an asyncio library.

Read-only tools race and are discarded, process tools get a bounded grace window, mutating and
extension calls are awaited, pending permissions are cancelled before they can be approved, and
``abort()`` walks the in-flight calls itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from turnwatch._lazy import exports

if TYPE_CHECKING:
    from turnwatch.runtime.control import ControlServer
    from turnwatch.runtime.events import Event, EventSink, FanOut, MemorySink
    from turnwatch.runtime.gate import Answer
    from turnwatch.runtime.handle import CallHandle
    from turnwatch.runtime.host import LocalHost
    from turnwatch.runtime.model import (
        BUILTIN_CLASSES,
        DEFAULT_GRACE_S,
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
    from turnwatch.runtime.runtime import Runtime
    from turnwatch.runtime.session import Session, Turn

_WHERE = {
    "ControlServer": "turnwatch.runtime.control",
    "Event": "turnwatch.runtime.events",
    "EventSink": "turnwatch.runtime.events",
    "FanOut": "turnwatch.runtime.events",
    "MemorySink": "turnwatch.runtime.events",
    "Answer": "turnwatch.runtime.gate",
    "LocalHost": "turnwatch.runtime.host",
    "BUILTIN_CLASSES": "turnwatch.runtime.model",
    "POLICY_OF": "turnwatch.runtime.model",
    "CallIdReusedError": "turnwatch.runtime.model",
    "Mode": "turnwatch.runtime.model",
    "Outcome": "turnwatch.runtime.model",
    "Phase": "turnwatch.runtime.model",
    "Policy": "turnwatch.runtime.model",
    "Receipt": "turnwatch.runtime.model",
    "StopSource": "turnwatch.runtime.model",
    "ToolClass": "turnwatch.runtime.model",
    "ToolResult": "turnwatch.runtime.model",
    "TurnBusyError": "turnwatch.runtime.model",
    "TurnOutcome": "turnwatch.runtime.model",
    "TurnwatchError": "turnwatch.runtime.model",
    "UnknownSessionError": "turnwatch.runtime.model",
    "UnknownTurnError": "turnwatch.runtime.model",
    "class_of": "turnwatch.runtime.model",
    "AbortRequest": "turnwatch.runtime.protocol",
    "ExecuteRequest": "turnwatch.runtime.protocol",
    "Host": "turnwatch.runtime.protocol",
    "HostResult": "turnwatch.runtime.protocol",
    "HostStatus": "turnwatch.runtime.protocol",
    "Progress": "turnwatch.runtime.protocol",
    "Started": "turnwatch.runtime.protocol",
    "AbortRecord": "turnwatch.runtime.registry",
    "AbortRegistry": "turnwatch.runtime.registry",
    "DEFAULT_GRACE_S": "turnwatch.runtime.model",
    "Runtime": "turnwatch.runtime.runtime",
    "CallHandle": "turnwatch.runtime.handle",
    "Session": "turnwatch.runtime.session",
    "Turn": "turnwatch.runtime.session",
}

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


__getattr__, __dir__ = exports(__name__, _WHERE)
