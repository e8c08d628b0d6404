"""One session served for months keeps its recent turns, not its history.

A chat that never goes idle long enough to be evicted (a coding session left open for a week)
kept every turn it ever ran, each call with its result: a 10 KB result per turn was 10 MB per
thousand turns, for the session's life. A session now keeps its last ``max_settled_turns``
settled turns whole and folds older ones into the hashes an evicted session's tombstone keeps,
from which what arrives late is answered exactly as it was while the turn was kept.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnwatch import names
from turnwatch.runtime import (
    Answer,
    CallIdReusedError,
    HostResult,
    HostStatus,
    LocalHost,
    MemorySink,
    Runtime,
    Turn,
    UnknownTurnError,
)
from turnwatch.runtime.retention import MAX_SETTLED_TURNS, UsedIds, tombstone
from turnwatch.testing import ManualClock, check_invariants

RESULT = HostResult(HostStatus.OK, "x" * 10_000)


async def ok() -> HostResult:
    return RESULT


async def one_turn(rt: Runtime, session: str = "s") -> None:
    turn = rt.start_turn(session)
    await turn.run_call("Grep", ok, tool_class="read_only")
    await turn.finish()


async def test_a_session_of_thousands_of_turns_keeps_its_recent_turns_not_its_history() -> None:
    rt = Runtime(LocalHost(subreaper=False), max_settled_turns=10)
    for _ in range(500):
        await one_turn(rt)
    gc.collect()
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    for _ in range(1000):
        await one_turn(rt)
    gc.collect()
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    sess = rt.sessions["s"]
    assert len(sess.turns) <= 2 * 10 + 1
    assert len(sess.used_call_ids) <= 2 * 10 + 1
    # Kept whole, the 1000 turns were over 10 MB (their results alone); folded, 8 bytes an id.
    assert after - before < 1_000_000, after - before


async def test_the_default_bound_holds_too() -> None:
    rt = Runtime(LocalHost(subreaper=False))
    for _ in range(3 * MAX_SETTLED_TURNS):
        await one_turn(rt)
    assert len(rt.sessions["s"].turns) <= 2 * MAX_SETTLED_TURNS + 1


Probe = Callable[[], Any]


def live(rt: Runtime, session: str) -> Turn:
    turn = rt.sessions[session].live
    assert turn is not None
    return turn


def answer(probe: Probe) -> object:
    """What a probe answers, or the type of what it raises."""
    try:
        return probe()
    except Exception as exc:
        return type(exc)


async def test_what_arrives_late_for_a_folded_turn_is_answered_as_while_it_was_kept() -> None:
    sink = MemorySink()
    rt = Runtime(LocalHost(subreaper=False), sink=sink, max_settled_turns=1)
    # t1: a prompt answered, and a call never asked; t2: a prompt closed by a stop.
    t1 = rt.start_turn("s")
    asked = t1.request("Grep", {}, ask_permission=True)
    assert rt.answer_permission("s", asked.call_id, True) is Answer.GRANTED
    plain = t1.request("Grep", {}, ask_permission=False)
    await t1.finish()
    t2 = rt.start_turn("s")
    closed = t2.request("Write", {}, ask_permission=True)
    await rt.abort("s")

    async def stop(turn: str) -> object:
        try:
            return await rt.abort("s", turn=turn)
        except Exception as exc:
            return type(exc)

    probes: dict[str, Probe] = {
        "answer asked": lambda: rt.answer_permission("s", asked.call_id, False),
        "answer closed": lambda: rt.answer_permission("s", closed.call_id, True),
        "answer plain": lambda: rt.answer_permission("s", plain.call_id, True),
        "answer unknown": lambda: rt.answer_permission("s", "nobody", True),
        "abort_call": lambda: rt.abort_call("s", t1.id, plain.call_id, "Grep"),
        "abort_call unused": lambda: rt.abort_call("s", t1.id, "s.t1.c99", "Grep"),
        "abort_call unknown turn": lambda: rt.abort_call("s", "s.t99", "x", "Grep"),
        "turn id": lambda: rt.sessions["s"].start_turn(t1.id),
        "call id": lambda: live(rt, "s").request("Grep", {}, call_id=plain.call_id),
    }
    t3 = rt.start_turn("s")
    kept = {name: answer(p) for name, p in probes.items()}
    kept_stops = {t: await stop(t) for t in (t1.id, t2.id, "s.t99")}
    await t3.finish()
    for _ in range(4):  # t1 and t2 are folded now
        await one_turn(rt)
    sess = rt.sessions["s"]
    assert t1.id not in sess.turns
    assert t2.id not in sess.turns
    rt.start_turn("s")
    folded = {name: answer(p) for name, p in probes.items()}
    folded_stops = {t: await stop(t) for t in (t1.id, t2.id, "s.t99")}
    assert folded == kept
    assert folded_stops == kept_stops
    assert kept["answer asked"] is Answer.LATE
    assert kept["answer closed"] is Answer.LATE
    assert kept["answer plain"] is LookupError
    assert kept["call id"] is CallIdReusedError
    assert kept_stops["s.t99"] is UnknownTurnError
    # Both late answers recorded, folded or not.
    assert len(sink.of(names.PERMISSION_LATE, call=closed.call_id)) == 2
    assert check_invariants(list(sink)) == []


async def test_folded_ids_stay_used_after_the_session_is_evicted_and_comes_back() -> None:
    clock = ManualClock()
    rt = Runtime(
        LocalHost(subreaper=False), max_settled_turns=1, retain_settled_s=10.0, clock=clock
    )
    first = rt.start_turn("s")
    await first.run_call("Grep", ok, tool_class="read_only", call_id="mine")
    await first.finish()
    for _ in range(5):
        await one_turn(rt)
    assert first.id not in rt.sessions["s"].turns  # folded
    clock.advance(11.0)
    await one_turn(rt, "other")  # a session opened: the settled ones due are evicted
    assert rt.evicted("s")
    back = rt.start_turn("s")
    assert back.id == "s.t7"
    with pytest.raises(ValueError, match="already used"):
        rt.sessions["s"].start_turn(first.id)
    with pytest.raises(CallIdReusedError):
        back.request("Grep", {}, call_id="mine")


async def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="max_settled_turns"):
        Runtime(LocalHost(subreaper=False), max_settled_turns=-1)


@given(st.lists(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40), max_size=60))
def test_used_ids_hold_every_hash_added_in_few_runs(batches: list[list[int]]) -> None:
    used = UsedIds()
    for batch in batches:
        used.add(batch)
    added = {h for batch in batches for h in batch}
    assert all(h in used for h in added)
    assert not any(h + 1 in used for h in added if h + 1 not in added and h < 2**63 - 1)
    assert len(used) == sum(map(len, batches))
    # Each run over twice the next: a lookup bisects at most log2(n) + 1 of them.
    assert used.runs <= max(len(used), 1).bit_length()
    packed = UsedIds(used.packed())
    assert packed.runs == (1 if added else 0)
    assert all(h in packed for h in added)


async def test_the_names_this_replaced_still_work_and_say_so() -> None:
    rt = Runtime(LocalHost(subreaper=False), max_settled_turns=0)
    for _ in range(3):
        await one_turn(rt)
    sess = rt.sessions["s"]
    with pytest.warns(DeprecationWarning, match="Session.history"):
        past = sess.past
    assert past is not None
    assert past.turns == 2  # folded as the second and third turns started
    assert past.used_id("t", "s.t1")
    with pytest.warns(DeprecationWarning, match=r"Session.tombstone\(\)"):
        stone = tombstone(["s.t9"], ["c9"], "s.t9", past)
    assert stone.turns == 3
    assert stone.used_id("c", "c9")
    assert stone.used_id("t", "s.t2")


def test_turn_is_still_importable_from_its_old_home() -> None:
    from turnwatch.runtime import session, turn

    assert session.Turn is turn.Turn
    assert session.SessionEnv is turn.SessionEnv
