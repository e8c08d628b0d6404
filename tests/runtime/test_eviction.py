"""A runtime serving sessions all day keeps what is live: settled sessions are evicted (after
``retain_settled_s``, or past ``max_settled``, oldest first) to tombstones, from which what
arrives late is still answered as the ADR says: a stop is ``stale``, a permission answer
``LATE``, a used call or turn id refused when the session comes back."""

from __future__ import annotations

import pytest

from turnwatch import names
from turnwatch.runtime import (
    Answer,
    CallIdReusedError,
    HostResult,
    HostStatus,
    LocalHost,
    MemorySink,
    Receipt,
    Runtime,
)
from turnwatch.testing import ManualClock, check_invariants

OK = HostResult(HostStatus.OK)


async def served(rt: Runtime, session: str, *, ask: bool = False) -> str:
    """One turn of one read-only call, run to its end; the call id."""
    turn = rt.start_turn(session)

    async def run() -> HostResult:
        return OK

    if ask:
        handle = turn.request("Grep", {}, ask_permission=True)
        return handle.call_id
    await turn.run_call("Grep", run, tool_class="read_only")
    await turn.finish()
    return f"{turn.id}.c1"


async def test_past_max_settled_the_oldest_are_evicted_and_memory_stays_bounded() -> None:
    rt = Runtime(LocalHost(subreaper=False), max_settled=50)
    for i in range(2000):
        await served(rt, f"s{i}")
    assert len(rt.sessions) <= 51  # the bound, and the one that just settled
    assert len(rt.retention.tombstones) >= 1949
    assert "s1999" in rt.sessions  # the newest kept
    assert rt.evicted("s0")


async def test_past_retain_settled_s_a_settled_session_is_evicted() -> None:
    clock = ManualClock()
    rt = Runtime(LocalHost(subreaper=False), clock=clock, retain_settled_s=10.0)
    await served(rt, "old")
    clock.advance(5.0)
    await served(rt, "new")
    assert set(rt.sessions) == {"old", "new"}
    clock.advance(6.0)  # old settled 11 s ago, new 6 s ago
    await served(rt, "newer")
    assert set(rt.sessions) == {"new", "newer"}


async def test_what_arrives_late_for_an_evicted_session_is_answered_as_the_adr_says() -> None:
    sink = MemorySink()
    rt = Runtime(LocalHost(subreaper=False), sink=sink, retain_settled_s=0.0)
    cid = await served(rt, "s")
    assert rt.evicted("s")
    assert await rt.abort("s") is Receipt.STALE  # never UnknownSessionError
    assert rt.answer_permission("s", cid, True) is Answer.LATE
    assert sink.of(names.PERMISSION_LATE, call=cid)
    rt.abort_call("s", "s.t1", cid, "Grep")  # a typed abort for it: nothing to do
    # The session comes back: its ids stay used, its turns numbered on.
    turn = rt.start_turn("s")
    assert turn.id == "s.t2"
    with pytest.raises(CallIdReusedError):
        turn.request("Grep", {}, call_id=cid)
    with pytest.raises(ValueError, match="already used"):
        rt.sessions["s"].start_turn("s.t1")
    # A stop naming its turn from before: late, not unknown (it was UnknownTurnError).
    assert await rt.abort("s", turn="s.t1") is Receipt.STALE
    await turn.finish()
    assert check_invariants(list(sink)) == []


async def test_a_session_with_a_prompt_open_or_a_turn_live_is_never_evicted() -> None:
    rt = Runtime(LocalHost(subreaper=False), retain_settled_s=0.0, max_settled=0)
    cid = await served(rt, "asking", ask=True)  # its turn is live, its prompt open
    for i in range(20):
        await served(rt, f"s{i}")
    assert "asking" in rt.sessions
    assert rt.answer_permission("asking", cid, False) is Answer.DENIED
    turn = rt.sessions["asking"].live
    assert turn is not None
    assert (await turn.finish()).value == "completed"  # its denied call resolved, then it settled
