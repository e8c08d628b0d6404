"""Spans of time as people read them at a glance (``3 h 12 min ago``): one way, for every
command and the page."""

from __future__ import annotations

import time


def age(seconds: float) -> str:
    """A span people read at a glance: ``12 s``, ``4 min 5 s``, ``3 h 12 min``, ``237 d``
    (never ``5684h 11m``)."""
    secs = max(0, int(seconds))
    if secs < 60:
        return f"{secs} s"
    if secs < 3600:
        return f"{secs // 60} min {secs % 60} s"
    if secs < 2 * 86_400:
        return f"{secs // 3600} h {secs % 3600 // 60} min"
    return f"{secs // 86_400} d"


#: How far ahead of this clock a time may be and still read as now (clocks of two machines).
AHEAD_SLACK_S = 60.0


def ago(ts: float | None, now: float | None = None) -> str:
    """``3 h 12 min ago`` style (see :func:`age`); ``-`` for no time; ``3 h 0 min ahead``
    for a time past this clock's now by more than a minute (a runtime whose clock is ahead, or
    that wrote its local time as UTC): "0 s ago" would call such a session fresh."""
    if ts is None:
        return "-"
    since = (now or time.time()) - ts
    if since < -AHEAD_SLACK_S:
        return f"{age(-since)} ahead"
    return f"{age(since)} ago"
