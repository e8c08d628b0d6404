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
    (source ``cancel``, bounded by the grace window). The SDK runs the run to its end in a task
    of its own whether its events are read or not: the turn ends when that task does, read or
    not (a run nobody reads would otherwise keep its session "processing").
    Every other attribute is the SDK result's.
    """

    def __init__(self, runner: StoppableRunner, turn: Turn, result: RunResultStreaming) -> None:
        self.runner, self.turn, self.result = runner, turn, result
        self._stop: asyncio.Task[Any] | None = None
        self._end: asyncio.Task[bool] | None = None
        turn.on_stop.append(self._cancel_sdk)
        if result.run_loop_task is not None:
            result.run_loop_task.add_done_callback(lambda _task: self._ended())

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
        if await self._ended():
            raise RunStopped(f"the run of session {turn.session.id} was stopped")

    def _ended(self) -> asyncio.Task[bool]:
        """The turn's end, taken once: when the SDK's run task ends (read or not), or when
        its events are all read, whichever is first. Its result: whether the run was stopped."""
        if self._end is None:
            self._end = asyncio.ensure_future(self._settle())
        return self._end

    async def _settle(self) -> bool:
        turn, rt, result = self.turn, self.runner.runtime, self.result
        with contextlib.suppress(ValueError):
            turn.on_stop.remove(self._cancel_sdk)
        task = result.run_loop_task
        cancelled = result._cancel_mode != "none"  # noqa: SLF001 - the SDK's own cancel()
        if turn.stopping or cancelled or (task is not None and task.cancelled()):
            if not turn.stopping:  # the SDK's own cancel: the same walk
                await rt.abort(turn.session.id, source=StopSource.FRAMEWORK, turn=turn.id)
            await turn.finish()
            return True
        if _raised(result):
            await turn.finish(TurnOutcome.FAILED)
        elif result.interruptions:
            self.runner.ask(turn, result.interruptions)
        else:
            await turn.finish()
        return False


def _raised(result: RunResultStreaming) -> bool:
    """Whether the run ended in an error its reader is (or would be) raised: its task's, one
    the SDK stored, or ``max_turns`` overrun (the SDK finds that only as the events are read;
    unread, the run just ends) and no error handler of the run's took it."""
    task = result.run_loop_task
    if task is not None and task.done() and not task.cancelled() and task.exception() is not None:
        return True
    if result._stored_exception is not None:  # noqa: SLF001 - the SDK keeps it there
        return True
    handled = getattr(result, "_max_turns_handled", False)
    return result.max_turns is not None and result.current_turn > result.max_turns and not handled
