"""What the watchdog says while it runs: each finding when it appears, when what was done about
it changes, and when it clears, with a summary of what stands every so often.

A standing finding is not news: printed on every scan, one pinned session made 325 identical
lines in a minute, and the line that mattered scrolled away.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from turnwatch.watchdog.cycle import Cycle

#: How often the standing findings are summed up, seconds.
SUMMARY_EVERY_S = 60.0


def _describe(kind: str, session: str, what: str) -> str:
    return f"{kind} {session}: {what}"


@dataclass
class ChangeLog:
    """Turns each cycle into the lines worth printing."""

    summary_every_s: float = SUMMARY_EVERY_S
    clock: Callable[[], float] = time.monotonic
    _seen: dict[tuple[object, ...], str] = field(default_factory=dict)
    _summary_at: float | None = None

    def lines(self, cycle: Cycle) -> list[str]:
        """New, changed and cleared findings of ``cycle``; a summary when one is due."""
        done = {id(a.finding): a for a in cycle.actions}
        now: dict[tuple[object, ...], str] = {}
        out = []
        for f in cycle.findings:
            a = done.get(id(f))
            state = f"{a.said} → {a.result} {a.detail}".rstrip() if a else f"{f.detail}"
            now[f.key] = _describe(f.kind, f.session, state)
            before = self._seen.get(f.key)
            if before is None:
                out.append("found " + now[f.key])
            elif before != now[f.key]:
                out.append("now " + now[f.key])
        gone = {key: line for key, line in self._seen.items() if key not in now}
        if cycle.unread is None:
            out += ["cleared " + line for line in gone.values()]
        else:  # a scan that could not read the ledger cleared nothing it did not see
            now.update(gone)
        self._seen = now
        t = self.clock()
        if self._summary_at is None:
            self._summary_at = t + self.summary_every_s
        elif t >= self._summary_at:
            self._summary_at = t + self.summary_every_s
            if now:
                out.append(f"{len(now)} finding(s) standing")
        return out
