"""A call's cancellation flag, as worker threads read it: ``threading.Event``'s contract (set,
is_set, wait with and without a timeout), made without an event until a thread waits (#31)."""

from __future__ import annotations

import threading
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from turnwatch.runtime.tools.context import CancelFlag


def test_a_flag_is_clear_then_set_and_stays_set() -> None:
    flag = CancelFlag()
    assert not flag.is_set()
    assert flag.wait(0.01) is False  # a timeout: not set
    flag.set()
    flag.set()  # twice: as an event, no error
    assert flag.is_set()
    assert flag.wait() is True  # set: returns at once
    assert flag.wait(0) is True


def test_a_waiting_thread_wakes_when_another_sets_it() -> None:
    flag = CancelFlag()
    woke: list[float] = []

    def waiter() -> None:
        if flag.wait(10):
            woke.append(time.monotonic())

    threads = [threading.Thread(target=waiter) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    set_at = time.monotonic()
    flag.set()
    for t in threads:
        t.join(5)
    assert len(woke) == 4  # every waiter, not only the one that made the event
    assert max(woke) - set_at < 2


@settings(max_examples=60, deadline=None)
@given(st.floats(0, 0.002), st.integers(1, 3))
def test_a_set_racing_the_first_wait_is_never_missed(delay: float, waiters: int) -> None:
    """set() between a waiter's check and the making of its event: the waiter still returns
    True (the flag is read again once the event exists), never sleeping out its timeout."""
    flag = CancelFlag()
    got: list[bool] = []
    threads = [threading.Thread(target=lambda: got.append(flag.wait(5))) for _ in range(waiters)]
    for t in threads:
        t.start()
    time.sleep(delay)
    flag.set()
    started = time.monotonic()
    for t in threads:
        t.join(6)
    assert got == [True] * waiters
    assert time.monotonic() - started < 4
