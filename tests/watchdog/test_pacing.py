"""The watchdog's pacing: at most ``rate_per_min`` recoveries a minute, and a session whose
recovery failed waits, doubling per failure up to the cap; a success, or the session no longer
found, clears it. The clock is the test's own: it does not wait ten minutes."""

from __future__ import annotations

from tests.conftest import FakeClock
from turnwatch.runtime.model import RecoveryResult
from turnwatch.watchdog.pacing import BACKOFF_MAX_S, BACKOFF_MIN_S, Pacing


def test_the_rate_limit_counts_the_last_minute_only() -> None:
    clock = FakeClock()
    p = Pacing(rate_per_min=3, clock=clock)
    assert [p.allowed() for _ in range(4)] == [True, True, True, False]
    clock.now += 59
    assert not p.allowed()  # a refusal is not counted: the window still holds three
    clock.now += 2  # the first three are more than a minute old
    assert [p.allowed() for _ in range(4)] == [True, True, True, False]


def test_a_failed_session_backs_off_doubling_up_to_the_cap() -> None:
    clock = FakeClock()
    p = Pacing(clock=clock)
    assert p.backing_off("s") == 0.0
    delays = []
    for _ in range(12):
        p.note("s", RecoveryResult.FAILED)
        delays.append(p.backing_off("s"))
    assert delays[0] == BACKOFF_MIN_S
    assert delays[1] == 2 * BACKOFF_MIN_S
    assert max(delays) == delays[-1] == BACKOFF_MAX_S
    assert p.backing_off("other") == 0.0  # no record crosses to another session
    clock.now += BACKOFF_MAX_S
    assert p.backing_off("s") == 0.0


def test_success_or_no_longer_found_clears_the_back_off() -> None:
    clock = FakeClock()
    p = Pacing(clock=clock)
    for session in ("a", "b", "c"):
        p.note(session, RecoveryResult.FAILED)
    p.note("a", RecoveryResult.OK)
    p.note("b", RecoveryResult.REPORT_ONLY)  # neither a failure nor a success: kept
    assert (p.backing_off("a"), p.backing_off("b")) == (0.0, BACKOFF_MIN_S)
    p.keep({"c"})
    assert (p.backing_off("b"), p.backing_off("c")) == (0.0, BACKOFF_MIN_S)
    # After a success the next failure starts from the minimum again.
    p.note("c", RecoveryResult.FAILED)
    p.note("c", RecoveryResult.OK)
    p.note("c", RecoveryResult.FAILED)
    assert p.backing_off("c") == BACKOFF_MIN_S
