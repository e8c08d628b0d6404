"""Small helpers shared by the benchmarks."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

import psutil


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


async def per_call(
    variants: Mapping[str, Callable[[str], Awaitable[object]]],
    *,
    calls: int,
    rounds: int,
    warm: int = 2,
) -> dict[str, float]:
    """Median seconds per call of each variant, whose run makes ``calls`` calls.

    Every round runs each variant once, in a shuffled order (fixed seed): drift and the order
    of runs fall on all alike. The first ``warm`` rounds warm caches and are not counted.
    """
    rng = random.Random(1)
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(rounds + warm):
        order = list(variants)
        rng.shuffle(order)
        for name in order:
            t0 = time.perf_counter()
            await variants[name](f"{name}-{i}")
            if i >= warm:
                seconds[name].append((time.perf_counter() - t0) / calls)
    return {name: median(s) for name, s in seconds.items()}


def per_call_rows(seconds: dict[str, float]) -> list[list[str]]:
    """Each variant's time per call and what it adds to the native run's."""
    native = seconds["native"]
    return [
        [name, fmt_s(s), "-" if name == "native" else f"{(s - native) * 1e6:+.0f} µs"]
        for name, s in seconds.items()
    ]


def shares(seconds: dict[str, float], hook: str, target: str = "") -> list[list[object]]:
    """Rows of a framework's per-call table: each variant's time per call, what it adds to the
    native run's, and (a wrapped variant) turnwatch's share, what it adds over ``hook`` (the
    framework's own cost of any hook), of the native cost."""
    native = seconds["native"]
    return [
        [
            name,
            fmt_s(s),
            "-" if name == "native" else f"{(s - native) * 1e6:+.0f} µs",
            f"{(s - seconds[hook]) / native:+.1%}{target}" if name.startswith("wrapped") else "-",
        ]
        for name, s in seconds.items()
    ]


def sleeping(seconds: str) -> list[psutil.Process]:
    """Live ``sleep <seconds>`` processes: what a stop benchmark's shell tool left running."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if p.info["cmdline"] == ["sleep", seconds] and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
    return out


async def until(cond: Callable[[], object], timeout: float = 30.0) -> None:
    """Until ``cond()`` holds (the tools of a benchmark's run have started)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("the tools never started")
        await asyncio.sleep(0.005)
