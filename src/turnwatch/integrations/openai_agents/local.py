"""What the SDK's local tools of other kinds than function tools share (a shell tool's executor,
an apply-patch tool's editor, a custom tool's invoker): how the runner runs one of their calls
as a turnwatch call, and the SDK's own way of calling what may be sync or async."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["RunCall", "result_of"]

#: How a runner runs one call of a tool as a turnwatch call of the run's turn:
#: ``(turn, tool name, call id, arguments, what runs it)`` → what the SDK is given.
RunCall = Callable[[Any, str, str, dict[str, Any], Callable[[], Awaitable[Any]]], Awaitable[Any]]


async def result_of(done: Any) -> Any:
    """``done``, awaited if it is awaitable: what the SDK's callables return (its
    ``MaybeAwaitable``)."""
    return await done if inspect.isawaitable(done) else done
