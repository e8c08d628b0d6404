"""How often the watchdog may act: a rate limit on recoveries across sessions, and per session a
back-off after a failed one, so a recovery that keeps failing is not retried every cycle."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from turnwatch.runtime.model import RecoveryResult

__all__ = ["BACKOFF_MAX_S", "BACKOFF_MIN_S", "DEFAULT_RATE_PER_MIN", "Pacing"]

DEFAULT_RATE_PER_MIN = 30
#: A session whose recovery failed is tried again after this, doubling per failure up to the max.
BACKOFF_MIN_S = 10.0
BACKOFF_MAX_S = 600.0


class Pacing:
    """Recoveries allowed in the last minute (``rate_per_min``), and each session's back-off.

    Memory is bounded by what is found: :meth:`keep` forgets the back-off of sessions no longer
    found, and the rate window holds at most ``rate_per_min`` instants. ``clock`` is monotonic
    seconds (a test's own clock need not wait ten minutes).
    """

    def __init__(
        self,
        rate_per_min: int = DEFAULT_RATE_PER_MIN,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate_per_min = rate_per_min
        self._clock = clock
        self._recent: deque[float] = deque()
        # Per session, after a failed recovery: (not before, monotonic; the delay that was set).
        self._backoff: dict[str, tuple[float, float]] = {}

    def backing_off(self, session: str) -> float:
        """Seconds until ``session`` may be tried again after a failure (0: now)."""
        entry = self._backoff.get(session)
        return max(0.0, entry[0] - self._clock()) if entry else 0.0

    def note(self, session: str, result: RecoveryResult) -> None:
        """A failure doubles the session's back-off (up to BACKOFF_MAX_S); a success clears it."""
        if result is RecoveryResult.FAILED:
            _, last = self._backoff.get(session, (0.0, BACKOFF_MIN_S / 2))
            delay = min(last * 2, BACKOFF_MAX_S)
            self._backoff[session] = (self._clock() + delay, delay)
        elif result is RecoveryResult.OK:
            self._backoff.pop(session, None)

    def allowed(self) -> bool:
        """Whether one more recovery fits in the last minute's rate; if so, it is counted."""
        now = self._clock()
        while self._recent and now - self._recent[0] > 60:
            self._recent.popleft()
        if len(self._recent) >= self.rate_per_min:
            return False
        self._recent.append(now)
        return True

    def keep(self, sessions: set[str]) -> None:
        """Forget the back-off of every session but these (the ones still found)."""
        self._backoff = {s: v for s, v in self._backoff.items() if s in sessions}
