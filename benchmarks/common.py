"""Small helpers shared by the benchmarks."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def pct(values: Sequence[float], q: float) -> float:
    """The q-quantile (nearest rank); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def fmt_s(value: float) -> str:
    """Seconds as µs / ms / s."""
    if math.isnan(value):
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        return f"{value * 1e3:.2f} ms"
    return f"{value:.2f} s"


def table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table."""
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)
