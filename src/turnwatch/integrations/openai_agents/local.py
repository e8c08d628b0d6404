"""What the SDK's local tools of other kinds than function tools share (a shell tool's executor,
an apply-patch tool's editor, a custom tool's invoker, a computer): how the runner runs one of
their calls as a turnwatch call, the SDK's own way of calling what may be sync or async, and how
the wrapper learns which call the SDK is running where it hands the tool the work alone."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeVar

__all__ = ["RunCall", "result_of", "said_while_running"]

_T = TypeVar("_T")
_MARK = "_turnwatch_says_its_call"

#: How a runner runs one call of a tool as a turnwatch call of the run's turn:
#: ``(turn, tool name, call id, arguments, what runs it)`` → what the SDK is given.
RunCall = Callable[[Any, str, str, dict[str, Any], Callable[[], Awaitable[Any]]], Awaitable[Any]]


async def result_of(done: Any) -> Any:
    """``done``, awaited if it is awaitable: what the SDK's callables return (its
    ``MaybeAwaitable``)."""
    return await done if inspect.isawaitable(done) else done


def said_while_running(
    owner: Any, name: str, var: ContextVar[_T | None], said: Callable[[dict[str, Any]], _T | None]
) -> bool:
    """Wrap ``owner.name`` (an async classmethod of the SDK's, private to it, that it calls
    with keywords) once per process: while it runs, ``var`` holds what ``said`` makes of its
    keywords, which call it runs (None if ``said`` raises: the SDK moved, and the call's work
    goes as the SDK runs it, or under an id of the turn's own). False if it was wrapped
    already. The SDK's version is pinned, and the tests fail when it moves the method."""
    original = getattr(owner, name)  # bound to the class
    if getattr(original, _MARK, False):
        return False

    async def wrapper(cls: type, *args: Any, **kwargs: Any) -> Any:
        try:
            value = said(kwargs)
        except Exception:
            value = None
        token = var.set(value)
        try:
            return await original(*args, **kwargs)
        finally:
            var.reset(token)

    setattr(wrapper, _MARK, True)
    setattr(owner, name, classmethod(wrapper))
    return True
