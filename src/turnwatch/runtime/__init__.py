"""The ADR's stop semantics as an asyncio library.

Read-only tools race and are discarded, process tools get a bounded grace window, mutating and
extension calls are awaited, pending permissions are cancelled before they can be approved, and
``abort()`` walks the in-flight calls itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from turnwatch._lazy import exports

if TYPE_CHECKING:
    from turnwatch.runtime.control import ControlServer as ControlServer
    from turnwatch.runtime.events import Event as Event
    from turnwatch.runtime.events import EventSink as EventSink
    from turnwatch.runtime.events import FanOut as FanOut
    from turnwatch.runtime.events import MemorySink as MemorySink
    from turnwatch.runtime.gate import Answer as Answer
    from turnwatch.runtime.handle import CallHandle as CallHandle
    from turnwatch.runtime.host import LocalHost as LocalHost
    from turnwatch.runtime.model import BUILTIN_CLASSES as BUILTIN_CLASSES
    from turnwatch.runtime.model import DEFAULT_GRACE_S as DEFAULT_GRACE_S
    from turnwatch.runtime.model import POLICY_OF as POLICY_OF
    from turnwatch.runtime.model import CallIdReusedError as CallIdReusedError
    from turnwatch.runtime.model import Mode as Mode
    from turnwatch.runtime.model import Outcome as Outcome
    from turnwatch.runtime.model import ParentStoppedError as ParentStoppedError
    from turnwatch.runtime.model import PastCalls as PastCalls
    from turnwatch.runtime.model import Phase as Phase
    from turnwatch.runtime.model import Policy as Policy
    from turnwatch.runtime.model import Receipt as Receipt
    from turnwatch.runtime.model import StopSource as StopSource
    from turnwatch.runtime.model import ToolClass as ToolClass
    from turnwatch.runtime.model import ToolResult as ToolResult
    from turnwatch.runtime.model import TurnBusyError as TurnBusyError
    from turnwatch.runtime.model import TurnOutcome as TurnOutcome
    from turnwatch.runtime.model import TurnwatchError as TurnwatchError
    from turnwatch.runtime.model import UnknownSessionError as UnknownSessionError
    from turnwatch.runtime.model import UnknownTurnError as UnknownTurnError
    from turnwatch.runtime.model import class_of as class_of
    from turnwatch.runtime.protocol import AbortRequest as AbortRequest
    from turnwatch.runtime.protocol import ExecuteRequest as ExecuteRequest
    from turnwatch.runtime.protocol import Host as Host
    from turnwatch.runtime.protocol import HostResult as HostResult
    from turnwatch.runtime.protocol import HostStatus as HostStatus
    from turnwatch.runtime.protocol import Progress as Progress
    from turnwatch.runtime.protocol import Started as Started
    from turnwatch.runtime.registry import AbortRecord as AbortRecord
    from turnwatch.runtime.registry import AbortRegistry as AbortRegistry
    from turnwatch.runtime.runtime import Runtime as Runtime
    from turnwatch.runtime.session import Session as Session
    from turnwatch.runtime.turn import Turn as Turn

__getattr__, __dir__ = exports(__name__)
