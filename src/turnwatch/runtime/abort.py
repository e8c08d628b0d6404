"""``agent.abort``: the stop of a session's live turn, the ADR's walk over its in-flight calls,
and its settlement once every call is resolved (design §1).

:class:`Stopping` is the base of :class:`~turnwatch.runtime.runtime.Runtime`, which keeps its
sessions, turns and calls; the stop reads them through the names declared below.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from turnwatch import names
from turnwatch.runtime.events import Event, EventSink, now_event
from turnwatch.runtime.model import (
    Mode,
    Receipt,
    StopSource,
    UnknownTurnError,
    parse_source,
)
from turnwatch.runtime.modes import ADR, StopRules
from turnwatch.runtime.protocol import Host, TurnAbortRequest
from turnwatch.runtime.retention import STOPPED
from turnwatch.runtime.session import Session, closest
from turnwatch.runtime.turn import Turn

# The logger the stop always said its failures on (a logging config that names it still works).
_log = logging.getLogger("turnwatch.runtime.runtime")


class Stopping:
    """The stop of a runtime's turns (see the module)."""

    if TYPE_CHECKING:  # the runtime's own, in Runtime
        rules: StopRules

        @property
        def sink(self) -> EventSink | None: ...

        @property
        def host(self) -> Host: ...

        @property
        def mode(self) -> Mode: ...

        @property
        def grace_s(self) -> float: ...

        def evicted(self, session_id: str) -> bool: ...

        def session(self, session_id: str) -> Session: ...

        def emit(
            self,
            kind: str,
            session: str,
            *,
            turn: str | None = None,
            call: str | None = None,
            tool: str | None = None,
            attrs: Mapping[str, Any] | None = None,
        ) -> None: ...

    async def abort(
        self,
        session_id: str,
        *,
        source: str | StopSource = StopSource.UI,
        turn: str | None = None,
        clicked_at: float | None = None,
        traceparent: str | None = None,
    ) -> Receipt:
        """``agent.abort``: stop the live turn and return once it is settled.

        Idempotent: a later stop joins the first one's settlement. ``clicked_at`` (unix seconds)
        is when the user clicked Stop, if known. A stop from the watchdog always runs the ADR walk,
        whatever the mode: that is how a pinned legacy session is recovered.
        """
        src = parse_source(source)
        if self.evicted(session_id):
            return Receipt.STALE  # settled, and evicted since: no live turn to stop
        sess = self.session(session_id)
        if turn is not None and not sess.used_turn_id(turn):
            raise UnknownTurnError(
                f"unknown turn {turn!r} in session {session_id!r}; turns: "
                f"{closest(turn, list(sess.turns))}"
            )
        live = sess.live
        if live is None or (turn is not None and turn != live.id):
            return self._no_live_turn(sess, turn, src)
        if live.stop_task is not None:
            self.emit(
                names.ABORT_RPC_RECEIVED,
                session_id,
                turn=live.id,
                attrs={names.K_SOURCE: src.value, names.K_RECEIPT: Receipt.JOINED.value},
            )
            if src is StopSource.WATCHDOG and not live.walked:
                self._walk(live, src)
            await asyncio.shield(live.stop_task)
            sess.returned(live, Receipt.JOINED)
            return Receipt.JOINED
        live.stop_started = time.monotonic()
        traceparent = traceparent or live.traceparent
        live.traceparent = traceparent
        if clicked_at is not None and self.sink is not None:
            self.sink(_clicked_event(session_id, live.id, clicked_at, src))
        attrs: dict[str, Any] = {
            names.K_SOURCE: src.value,
            names.K_MODE: self.mode.value,
            names.K_RECEIPT: Receipt.ACCEPTED.value,
        }
        if traceparent:
            attrs[names.K_TRACEPARENT] = traceparent
        self.emit(names.ABORT_RPC_RECEIVED, session_id, turn=live.id, attrs=attrs)
        live.stop_task = asyncio.get_running_loop().create_task(
            self._settle(live), name=f"stop {live.id}"
        )
        for callback in live.on_stop:
            try:
                callback()
            except Exception:  # the walk is under way: a framework's failing cancel cannot stop it
                _log.exception("a stop callback of turn %s failed", live.id)
        live.stop_children(src)  # nested runs first: the turn settles after they have
        # The walk now, in this step: a call admitted in the same tick finds its stop before it
        # can start, and no call waits a loop step for its handler.
        if self.rules.signal is not None and src is not StopSource.WATCHDOG:
            self.rules.signal(live, src)
        else:
            self._walk(live, src)
        await asyncio.shield(live.stop_task)
        sess.returned(live, Receipt.ACCEPTED)
        return Receipt.ACCEPTED

    def _no_live_turn(self, sess: Session, turn: str | None, src: StopSource) -> Receipt:
        """A stop with no live turn (or naming another): settled before it, or nothing to stop."""
        session_id = sess.id
        named = sess.turns.get(turn) if turn else sess.last
        if turn and named is None:  # a folded turn: settled, long ago
            return Receipt.ALREADY_SETTLED if sess.folded(STOPPED, turn) else Receipt.STALE
        if named is None or not named.settled.done():
            return Receipt.STALE
        if sess.processing and named is sess.last:
            # Settled, but the RPC that would clear "processing" never returned: finish it.
            self.emit(
                names.ABORT_RPC_RECEIVED,
                session_id,
                turn=named.id,
                attrs={
                    names.K_SOURCE: src.value,
                    names.K_RECEIPT: Receipt.ALREADY_SETTLED.value,
                },
            )
            sess.returned(named, Receipt.ALREADY_SETTLED)
            return Receipt.ALREADY_SETTLED
        return Receipt.ALREADY_SETTLED if named.stop_task is not None else Receipt.STALE

    async def _settle(self, turn: Turn) -> None:
        """After the walk: the turn settles once its nested runs have and every call is
        resolved."""
        await turn.children_stopped()
        await turn.wait_idle()
        if turn.lingering is not None:
            await turn.lingering
        turn.settle(turn.stop_outcome)

    async def _stop_failed(self, turn: Turn) -> None:
        """``turn``'s agent loop raised with calls in flight (``Turn.finish(FAILED)``): the stop,
        source ``framework`` (the run's own end), settling it failed."""
        await self.abort(turn.session.id, source=StopSource.FRAMEWORK, turn=turn.id)

    def _walk(self, turn: Turn, src: StopSource) -> None:
        """The abort walk: for each in-flight call, the handler its signal would run."""
        turn.walked = True
        inflight = [c for c in turn.calls.values() if not c.result.done()]
        self.emit(
            names.ABORT_WALK_STARTED,
            turn.session.id,
            turn=turn.id,
            attrs={names.K_INFLIGHT: len(inflight), names.K_SOURCE: src.value},
        )
        # The watchdog's walk is the ADR's whatever this runtime's mode: that is the recovery.
        handle = self.rules.handle if src is not StopSource.WATCHDOG else ADR.handle
        for call in inflight:
            handle(call, src)
        # What finished process calls left running belongs to them: the stop ends it too. One
        # look suffices: from here on, a process call still running has its tools.abort and
        # ends what it leaves itself, so no call of this turn hands over lingering processes.
        if turn.lingering is None:
            turn.lingering = asyncio.get_running_loop().create_task(
                self._stop_lingering(turn, src), name=f"lingering {turn.id}"
            )

    async def _stop_lingering(self, turn: Turn, src: StopSource) -> None:
        sess = turn.session.id
        request = TurnAbortRequest(sess, turn.id, src, self.grace_s)
        for reaped in await self.host.abort_turn(request):
            self.emit(
                names.PROCESS_REAPED,
                sess,
                turn=turn.id,
                call=reaped.call_id,
                tool=reaped.tool,
                attrs={
                    names.K_PIDS: list(reaped.gone),
                    names.K_SIGNAL: reaped.by,
                    names.K_SURVIVORS: list(reaped.survivors),
                    names.K_LINGERING: True,
                },
            )


def _clicked_event(session: str, turn: str, clicked_at: float, src: StopSource) -> Event:
    ev = now_event(names.STOP_CLICKED, session, turn=turn, attrs={names.K_SOURCE: src.value})
    # Place the click on the monotonic clock too, so offsets from it are exact.
    lag_ns = max(0, int((ev.ts_unix - clicked_at) * 1e9))
    return ev._replace(ts_unix=clicked_at, mono_ns=(ev.mono_ns or 0) - lag_ns)
