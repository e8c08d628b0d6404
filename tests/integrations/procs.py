"""Processes a wrapped framework's calls started, found by their call marker: what a test checks
is gone once ``abort()`` returned, and what a native run's test ends itself."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterable

import psutil

from tests.conftest import this_run
from turnwatch.runtime.tools.proctree import CALL_MARKER


def marked_alive(session: str) -> list[psutil.Process]:
    """Live processes a call of ``session`` started (its marker is in their environment)."""
    out = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
            marker = env.get(CALL_MARKER, "")
            if (
                marker.startswith(f"{session}/")
                and this_run(env)
                and p.status() != psutil.STATUS_ZOMBIE
            ):
                out.append(p)
        except psutil.Error:
            continue
    return out


def end_marked(session: str, spawned: Iterable[subprocess.Popen[bytes]] = ()) -> None:
    """Every process marked for ``session`` (by its marker: their parents may be gone), and each
    of ``spawned`` reaped, so none is left for the next test to find."""
    for _ in range(100):  # again until none is left: a shell may fork as it is killed
        left = marked_alive(session)
        if not left:
            break
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.kill()
        time.sleep(0.05)
    for proc in spawned:
        proc.wait()
