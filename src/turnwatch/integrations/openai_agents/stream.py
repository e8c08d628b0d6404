"""A wrapped streamed run: the SDK's result, whose ``cancel()`` is the ADR's stop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from agents.result import RunResultStreaming

from turnwatch.integrations.wrappers import stop_on_cancel
from turnwatch.runtime.model import StopSource, TurnOutcome, TurnwatchError
from turnwatch.runtime.turn import Turn

if TYPE_CHECKING:
    from turnwatch.integrations.openai_agents.runner import StoppableRunner

__all__ = ["RunStopped", "StoppableStream"]


class RunStopped(TurnwatchError):
    """The run was stopped; its turn has settled (every call released) when this is raised."""


class StoppableStream:
    """A wrapped streamed run: the SDK's :attr:`result`, whose events :meth:`stream_events`
    yields, and whose :meth:`cancel` is the ADR's stop.

    ``cancel("immediate")`` (the default) runs the stop's walk at once; ``cancel("after_turn")``
    lets the SDK finish its model turn's calls, and the run's end is then the stop. A cancel of
    the task consuming the events, or a consumer that stops iterating (``break``), is a stop too
    (source ``cancel``, bounded by the grace window).
    Every other attribute is the SDK result's.
    """

    def __init__(self, runner: StoppableRunner, turn: Turn, result: RunResultStreaming) -> None:
        self.runner, self.turn, self.result = runner, turn, result
        self._stop: asyncio.Task[Any] | None = None
        turn.on_stop.append(self._cancel_sdk)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)

    def _cancel_sdk(self) -> None:
        self.result.cancel("immediate")

    def cancel(self, mode: str = "immediate") -> None:
        """Stop the run: ``immediate`` (the walk, now) or ``after_turn`` (the SDK's own)."""
        if mode not in ("immediate", "after_turn"):
            raise ValueError(f"cancel mode {mode!r}: immediate or after_turn")
        if mode == "after_turn" and not self.turn.stopping:
            self.result.cancel("after_turn")
            return
        if self._stop is None and not self.turn.stopping:
            rt, turn = self.runner.runtime, self.turn
            self._stop = asyncio.ensure_future(
                rt.abort(turn.session.id, source=StopSource.FRAMEWORK, turn=turn.id)
            )

    async def stream_events(self) -> AsyncGenerator[Any, None]:
        """The SDK's events; at the end, the turn's end (:class:`RunStopped` if it was
        stopped, once every call is released)."""
        turn, rt = self.turn, self.runner.runtime
        try:
            async for event in self.result.stream_events():
                yield event
        except (asyncio.CancelledError, GeneratorExit):
            # The consumer was cancelled, or stopped iterating: nobody reads the run any more,
            # and it would go on unread. That is a stop (source ``cancel``), bounded.
            await stop_on_cancel(rt, turn)
            raise
        except BaseException:
            await turn.finish(TurnOutcome.FAILED)
            raise
        finally:
            with contextlib.suppress(ValueError):
                turn.on_stop.remove(self._cancel_sdk)
        cancelled = getattr(self.result, "_cancel_mode", "none") != "none"  # the SDK's cancel()
        if turn.stopping or cancelled:
            if not turn.stopping:  # the SDK's own cancel: the same walk
                await rt.abort(turn.session.id, source=StopSource.FRAMEWORK, turn=turn.id)
            await turn.finish()
            raise RunStopped(f"the run of session {turn.session.id} was stopped")
        if self.result.interruptions:
            self.runner.ask(turn, self.result.interruptions)
            return
        await turn.finish()
