"""The tests' own process fixture: what it kills at teardown leaves no zombie behind for a later
test to count (#35: a loaded run failed a zombie check on another test's leftover)."""

from __future__ import annotations

import os

import psutil

from tests.conftest import Procs, wait_until
from turnwatch.runtime.tools import proctree


def test_kill_all_reaps_the_children_of_what_it_kills() -> None:
    assert proctree.become_subreaper()  # as every LocalHost makes the test process
    procs = Procs()
    shell = procs.spawn(["sh", "-c", "sleep 1000 & wait"])
    wait_until(lambda: shell.children(), what="the shell's child")
    (child,) = shell.children()
    procs.kill_all()
    # Orphaned as its shell died, the child re-parents here: reaped, not left a zombie.
    try:
        p = psutil.Process(child.pid)
        left = p.create_time() == child.create_time() and p.ppid() == os.getpid()
    except psutil.NoSuchProcess:
        left = False
    assert not left, f"{child.pid} left as {p.status()}"
