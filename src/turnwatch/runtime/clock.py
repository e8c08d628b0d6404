"""The clock the stop's windows are measured on.

A grace window is a deadline: the runtime stops waiting for a process call when it passes, and
the host sends SIGKILL when its own (slightly shorter) one passes. Both read the time from a
:class:`Clock`. The real one is the event loop's; a test passes a
:class:`~turnwatch.testing.ManualClock` to both and moves time by hand, so a ten-second window
takes no time, and which deadline comes first is the test's choice, not the machine's load.
Only the windows are on this clock: processes, pipes and the kernel keep real time.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio


class Clock:
    """Real time (the event loop's timers, ``time.monotonic``)."""

    def monotonic(self) -> float:
        """Seconds on this clock (only differences mean anything)."""
        return time.monotonic()

    async def wait(self, fut: asyncio.Future[Any], timeout: float) -> bool:
        """Until ``fut`` is done (True) or ``timeout`` seconds pass (False); never cancels it."""
        import asyncio  # here: the watchdog's look imports this module and runs no loop

        done, _ = await asyncio.wait((fut,), timeout=max(timeout, 0.0))
        return bool(done)

    async def limit(self, op: Callable[[float], Awaitable[bool]], timeout: float) -> bool:
        """``op(timeout)``, an operation that bounds itself in seconds, bounded on this clock."""
        return await op(timeout)


#: The clock of everything not given another.
REAL = Clock()
