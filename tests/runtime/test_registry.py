"""The abort registry: typed records and Bash tombstones (with a fake clock, so no waiting)."""

from __future__ import annotations

from tests.conftest import FakeClock
from turnwatch.runtime import AbortRegistry, LocalHost, Phase, Runtime, StopSource


def test_tombstone_expires_after_its_ttl() -> None:
    clock = FakeClock()
    reg = AbortRegistry(tombstone_ttl_s=5.0, clock=clock)
    reg.record("s", "t", "c", "Bash", StopSource.UI)
    clock.now += 5.1
    assert reg.take("s", "t", "c", "Bash") is None
    assert len(reg) == 0


def test_tombstone_within_its_ttl_is_taken_once() -> None:
    clock = FakeClock()
    reg = AbortRegistry(tombstone_ttl_s=5.0, clock=clock)
    reg.record("s", "t", "c", "Bash", StopSource.UI)
    clock.now += 4.9
    rec = reg.take("s", "t", "c", "Bash")
    assert rec is not None
    assert rec.source == "ui"
    assert reg.take("s", "t", "c", "Bash") is None


def test_record_never_crosses_tool_session_or_turn() -> None:
    reg = AbortRegistry()
    reg.record("s", "t1", "c", "Grep", StopSource.UI)
    assert reg.take("s", "t1", "c", "Read") is None  # another tool reusing the call id
    assert reg.take("other", "t1", "c", "Grep") is None  # another session
    assert reg.take("s", "t2", "c", "Grep") is None  # another turn (and the record is spent)


def test_first_reason_is_kept() -> None:
    reg = AbortRegistry()
    first = reg.record("s", "t", "c", "Grep", StopSource.KEYBOARD)
    again = reg.record("s", "t", "c", "Grep", StopSource.WATCHDOG)
    assert again is first


def test_forget_turn_drops_its_records() -> None:
    reg = AbortRegistry()
    reg.record("s", "t1", "c1", "Grep", StopSource.UI)
    reg.record("s", "t2", "c2", "Grep", StopSource.UI)
    reg.forget_turn("s", "t1")
    assert reg.peek("s", "t1", "c1", "Grep") is None
    assert reg.peek("s", "t2", "c2", "Grep") is not None


async def test_a_typed_abort_for_a_settled_turn_leaves_nothing_behind() -> None:
    """A typed abort naming a call its turn never requested, arriving after the turn settled,
    was kept until taken, and nothing could take it: one record for the runtime's life per
    late abort (and every later settle scanned them all)."""
    rt = Runtime(LocalHost(subreaper=False))
    for i in range(50):
        turn = rt.start_turn("s")
        await turn.finish()
        rt.abort_call("s", turn.id, f"late{i}", "Write")
        rt.abort_call("s", turn.id, f"late{i}", "Bash")  # Bash's expiring kind too
    assert len(rt.registry) == 0
    # Before its turn settles, the same abort waits for its call, which never starts.
    turn = rt.start_turn("s")
    rt.abort_call("s", turn.id, "early", "Write")
    rt.abort_call("s", turn.id, "early", "Bash")
    assert len(rt.registry) == 2
    assert turn.request("Write", {}, call_id="early").state is Phase.ABORTED
    await turn.finish()
    assert len(rt.registry) == 0  # the turn settled: what it never requested is dropped too
