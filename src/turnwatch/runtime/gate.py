"""Permission prompts and the admission queue: the places a call waits before it starts.

Both take the call's stop future, so a stop registered before the wait is delivered on entry and a
stop during the wait ends it; neither lets a call through once its stop has landed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from enum import StrEnum
from typing import Any


class Answer(StrEnum):
    """What became of a permission answer."""

    GRANTED = "granted"
    DENIED = "denied"
    LATE = "late"  # the prompt was closed by a stop: the answer is refused


class Prompt:
    """One permission prompt. Once closed by a stop it can never be approved."""

    __slots__ = ("_answer", "closed")

    def __init__(self) -> None:
        # Resolves with True (approved) or False (denied); never after ``close()``.
        self._answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        # True once a stop closed the prompt; from then on every answer is LATE.
        self.closed = False

    @property
    def open(self) -> bool:
        """True while an answer can still take effect."""
        return not self.closed and not self._answer.done()

    def close(self) -> bool:
        """Close the prompt for a stop; True if it was open (so the close took something away)."""
        was_open = self.open
        self.closed = True
        return was_open

    def answer(self, approved: bool) -> Answer:
        """Apply a user's answer, unless a stop closed the prompt first."""
        if not self.open:
            return Answer.LATE
        self._answer.set_result(approved)
        return Answer.GRANTED if approved else Answer.DENIED

    async def wait(self, stop: asyncio.Future[Any]) -> bool | None:
        """The answer, or None when the stop came first."""
        if stop.done():
            return None
        await asyncio.wait((self._answer, stop), return_when=asyncio.FIRST_COMPLETED)
        if self._answer.done() and not self.closed:
            return self._answer.result()
        return None


class Admission:
    """A bounded number of running calls per session, admitted in FIFO order."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"admission limit must be at least 1, got {limit}")
        # Free slots; never negative. A slot freed while someone waits is handed over directly.
        self._free = limit
        self._waiters: deque[asyncio.Future[None]] = deque()

    def try_acquire(self) -> bool:
        """Take a free slot now if one is free and no one waits (FIFO): True if taken."""
        if self._free and not self._waiters:
            self._free -= 1
            return True
        return False

    async def acquire(self, stop: asyncio.Future[Any]) -> bool:
        """Take a slot; False (and no slot) when the stop came first."""
        if stop.done():
            return False
        if self._free and not self._waiters:
            self._free -= 1
            return True
        slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(slot)
        try:
            await asyncio.wait((slot, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not slot.done():
                slot.cancel()  # release() skips cancelled waiters
        if stop.done():
            if not slot.cancelled():
                self.release()  # the slot was handed to us as the stop landed: pass it on
            return False
        return True

    def release(self) -> None:
        """Give a slot back, to the first live waiter if any."""
        while self._waiters:
            slot = self._waiters.popleft()
            if not slot.done():
                slot.set_result(None)
                return
        self._free += 1
