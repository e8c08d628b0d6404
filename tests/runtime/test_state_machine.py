"""Hypothesis interleaves stops, repeated stops, permission answers, results and new turns.

The host here is scripted, not real: it is the one part we replace, because the point is to let
hypothesis decide *when* each tool finishes. It records the truth the invariants are checked
against: which calls it started, which are still running, which aborts it received.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from turnwatch import names
from turnwatch.runtime import (
    AbortRequest,
    Answer,
    ExecuteRequest,
    HostResult,
    HostStatus,
    MemorySink,
    Receipt,
    Runtime,
    Started,
    ToolClass,
    Turn,
)
from turnwatch.runtime.protocol import MessageCallback, Reaped, TurnAbortRequest
from turnwatch.testing import InvariantChecker

TOOLS = ["Grep", "Read", "Bash", "Write", "Edit", "mcp__fs__write"]


class ScriptedHost:
    """Runs nothing; a call ends when the test says so, or at once when a race/grace stops."""

    def __init__(self) -> None:
        self.running: dict[tuple[str, str, str], tuple[ExecuteRequest, asyncio.Future[Any]]] = {}
        self.started: list[ExecuteRequest] = []
        self.aborts: list[AbortRequest] = []

    async def execute(self, request: ExecuteRequest, notify: MessageCallback) -> HostResult:
        key = (request.session, request.call_id, request.tool)
        done: asyncio.Future[HostResult] = asyncio.get_running_loop().create_future()
        self.running[key] = (request, done)
        self.started.append(request)
        notify(Started())
        try:
            return await done
        finally:
            self.running.pop(key, None)

    def abort(self, request: AbortRequest) -> None:
        self.aborts.append(request)
        entry = self.running.get((request.session, request.call_id, request.tool))
        if entry is None:
            return
        req, done = entry
        # Read-only and process tools honour the cancel; mutating and extension ones run on.
        if req.tool_class in (ToolClass.READ_ONLY, ToolClass.PROCESS) and not done.done():
            done.set_result(HostResult(HostStatus.ABORTED, "partial"))

    async def abort_turn(self, request: TurnAbortRequest) -> Sequence[Reaped]:
        return ()  # it starts no processes, so none can outlive a call

    def finish(self, key: tuple[str, str, str]) -> None:
        entry = self.running.get(key)
        if entry and not entry[1].done():
            entry[1].set_result(HostResult(HostStatus.OK, "done"))


class StopMachine(RuleBasedStateMachine):
    #: The runtime's retention (the evicting machine below settles for nothing).
    retain_settled_s = 600.0
    max_settled = 10_000
    #: Settled turns a session keeps whole (the folding machine below keeps none).
    max_settled_turns = 100

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.host = ScriptedHost()
        self.sink = MemorySink()
        self.checker = InvariantChecker()
        self.asks: set[str] = set()

        def sink(ev: Any) -> None:
            self.sink(ev)
            self.checker(ev)

        async def make() -> Runtime:
            return Runtime(
                self.host,
                grace_s=0.01,
                sink=sink,
                max_running=2,
                ask_permission=lambda tool, _c: tool in self.asks,
                retain_settled_s=self.retain_settled_s,
                max_settled=self.max_settled,
                max_settled_turns=self.max_settled_turns,
            )

        self.rt = self.loop.run_until_complete(make())
        self.sessions = ["a", "b"]
        self.handles: list[Any] = []
        self.turn_of: dict[tuple[str, str], Turn] = {}
        self.tasks: list[asyncio.Future[Any]] = []

    def teardown(self) -> None:
        for _req, fut in list(self.host.running.values()):
            if not fut.done():
                fut.set_result(HostResult(HostStatus.OK))
        self.spin(20)
        for t in self.tasks:
            t.cancel()
        self.loop.run_until_complete(asyncio.sleep(0))

        async def cancel_rest() -> None:
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        self.loop.run_until_complete(cancel_rest())
        self.loop.close()

    def do(self, fn: Any, *args: Any, **kw: Any) -> Any:
        """Run a runtime call inside the machine's loop (the runtime needs a running loop)."""

        async def inside() -> Any:
            return fn(*args, **kw)

        return self.loop.run_until_complete(inside())

    def spin(self, n: int = 3) -> None:
        for _ in range(n):
            self.loop.run_until_complete(asyncio.sleep(0))

    def live(self, s: str) -> Any:
        return self.rt.sessions[s].live if s in self.rt.sessions else None

    @rule(s=st.sampled_from(["a", "b"]))
    def start_turn(self, s: str) -> None:
        if self.live(s) is None:
            self.do(self.rt.start_turn, s)

    @rule(s=st.sampled_from(["a", "b"]), tool=st.sampled_from(TOOLS), ask=st.booleans())
    def request(self, s: str, tool: str, ask: bool) -> None:
        turn = self.live(s)
        if turn is None:
            return
        (self.asks.add if ask else self.asks.discard)(tool)
        handle = self.do(turn.request, tool, {})
        self.handles.append(handle)
        self.turn_of[(s, handle.call_id)] = turn
        self.spin()

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), approve=st.booleans())
    def answer(self, data: st.DataObject, approve: bool) -> None:
        h = data.draw(st.sampled_from(self.handles))
        sess = h.session
        if h.awaiting_permission:
            self.do(self.rt.answer_permission, sess, h.call_id, approve)
        self.spin()

    @precondition(lambda self: self.host.running)
    @rule(data=st.data())
    def host_finishes(self, data: st.DataObject) -> None:
        self.host.finish(data.draw(st.sampled_from(sorted(self.host.running))))
        self.spin()

    @rule(s=st.sampled_from(["a", "b"]), source=st.sampled_from(["ui", "keyboard", "watchdog"]))
    def stop(self, s: str, source: str) -> None:
        if s in self.rt.sessions or self.rt.evicted(s):
            self.tasks.append(self.loop.create_task(self.rt.abort(s, source=source)))
        self.spin()

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), approve=st.booleans())
    def answer_late(self, data: st.DataObject, approve: bool) -> None:
        """An answer for a call of a session evicted since is refused: LATE."""
        h = data.draw(st.sampled_from(self.handles))
        if self.rt.evicted(h.session):
            assert self.do(self.rt.answer_permission, h.session, h.call_id, approve) is Answer.LATE

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), approve=st.booleans())
    def answer_folded(self, data: st.DataObject, approve: bool) -> None:
        """An answer for a call of a turn folded since is answered as it was while kept."""
        h = data.draw(st.sampled_from(self.handles))
        sess = self.rt.sessions.get(h.session)
        if sess is None or self.turn_of[(h.session, h.call_id)].id in sess.turns:
            return
        if self.sink.of(names.PERMISSION_REQUESTED, session=h.session, call=h.call_id):
            assert self.do(self.rt.answer_permission, h.session, h.call_id, approve) is Answer.LATE
        else:
            with pytest.raises(LookupError):
                self.do(self.rt.answer_permission, h.session, h.call_id, approve)

    @precondition(lambda self: self.turn_of)
    @rule(data=st.data())
    def stop_folded(self, data: st.DataObject) -> None:
        """A stop naming a turn folded since: as while it was kept, already settled if a stop
        reached it, else stale."""
        turn = data.draw(st.sampled_from(sorted(self.turn_of.values(), key=lambda t: t.id)))
        sess = self.rt.sessions.get(turn.session.id)
        if sess is None or turn.id in sess.turns:
            return
        receipt = self.loop.run_until_complete(self.rt.abort(sess.id, turn=turn.id))
        assert receipt is (Receipt.ALREADY_SETTLED if turn.stopping else Receipt.STALE)

    @rule(s=st.sampled_from(["a", "b"]))
    def finish_turn(self, s: str) -> None:
        turn = self.live(s)
        if turn is not None:
            self.tasks.append(self.loop.create_task(turn.finish()))
        self.spin()

    @rule()
    def time_passes(self) -> None:
        self.loop.run_until_complete(asyncio.sleep(0.012))  # past the 10 ms grace window

    @invariant()
    def invariants_hold(self) -> None:
        assert self.checker.violations == [], self.checker.violations
        started = {(r.session, r.call_id) for r in self.host.started}
        closed_before_start = {
            (e.session, e.call)
            for e in self.sink.events
            if e.kind == names.TOOL_REFUSED
            or (e.kind == names.TOOL_FINISHED and e.attrs.get("before_start"))
        }
        # 7: eviction keeps what is live: only sessions still settling or live, and the bound.
        settled = [x for x in self.rt.sessions.values() if x.settled]
        assert len(settled) <= max(self.max_settled, 1) or self.retain_settled_s > 0
        for sess in self.rt.sessions.values():
            for turn in sess.turns.values():
                for call in turn.calls.values():
                    key = (sess.id, call.call_id)
                    # 2: a call stopped before it started never reaches the host.
                    if key in closed_before_start:
                        assert key not in started, f"{key} started after a pre-start stop"
                    if not turn.settled.done():
                        continue
                    # 1: settled => no open prompt, no started awaited call still on the host.
                    assert call.prompt is None or not call.prompt.open
                    if call.tool_class in (ToolClass.MUTATING, ToolClass.EXTENSION):
                        assert (sess.id, call.call_id, call.tool) not in self.host.running
        # 4: every abort the host received names a call that exists with that tool and turn
        # (as the event stream recorded it: an evicted session's calls are gone from memory).
        requested = {
            (e.session, e.call): (e.turn, e.tool)
            for e in self.sink.events
            if e.kind == names.TOOL_REQUESTED
        }
        for a in self.host.aborts:
            assert requested[(a.session, a.call_id)] == (a.turn, a.tool)


StopMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStopMachine = StopMachine.TestCase


class EvictingStopMachine(StopMachine):
    """The same interleavings with every settled session evicted at once: late stops, late
    answers and sessions coming back meet tombstones, not sessions."""

    retain_settled_s = 0.0
    max_settled = 0


EvictingStopMachine.TestCase.settings = StopMachine.TestCase.settings
TestEvictingStopMachine = EvictingStopMachine.TestCase


class FoldingStopMachine(StopMachine):
    """The same interleavings with every settled turn folded as the next one starts: late stops,
    late answers and reused ids meet a session's hashes, not its turns."""

    max_settled_turns = 0


FoldingStopMachine.TestCase.settings = StopMachine.TestCase.settings
TestFoldingStopMachine = FoldingStopMachine.TestCase
