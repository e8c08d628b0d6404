"""Agents used ``as_tool``: the nested run starts with the wrapped agent, and its calls are the
run's.

The SDK's ``Agent.as_tool()`` closes over the agent it was made from and starts the nested run with
``Runner.run(starting_agent=that agent)`` (``Runner.run_streamed`` when it streams): the agent's own
tools would run unwrapped, unseen by the stop. Two things of the SDK make it reachable without
touching the user's objects: the tool keeps its agent (``_agent_instance``, what the SDK's own
``RunState`` reads to find nested agents), and ``Runner`` looks its runner up at each call
(``set_default_agent_runner``). The wrapper installs, once per process, a runner that hands every
run to the one it found, except a run started inside a wrapped agent-tool call with that call's
agent: that run starts with the agent's wrapped clone, streamed, and the turn's stop cancels it
(``cancel("immediate")``, as the parent's), so its model asks for nothing more.

Both are private to the SDK (the version is pinned in ``pyproject.toml``; the tests of this module
fail when either moves). A user's own default runner installed afterwards is wrapped again at the
next agent-tool call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from agents import Agent, FunctionTool
from agents.result import RunResultStreaming
from agents.run import AgentRunner, get_default_agent_runner, set_default_agent_runner

from turnwatch.runtime.turn import Turn

__all__ = ["CALL_SCOPE", "NestingRunner", "agent_of", "nested_run"]

# The ids of a nested run's calls are qualified by the agent-tool call's ("a1/c1"): its model
# numbers its calls afresh, and two calls of one turn never share an id.
CALL_SCOPE: ContextVar[str] = ContextVar("turnwatch_sdk_call_scope", default="")


@dataclass(frozen=True)
class _Nested:
    original: Agent[Any]
    wrapped: Agent[Any]
    turn: Turn


_NESTED: ContextVar[_Nested | None] = ContextVar("turnwatch_sdk_nested", default=None)


def agent_of(tool: FunctionTool) -> Agent[Any] | None:
    """The agent ``tool`` runs, when ``Agent.as_tool()`` made it."""
    agent = getattr(tool, "_agent_instance", None)
    if getattr(tool, "_is_agent_tool", False) and isinstance(agent, Agent):
        return agent
    return None


@contextlib.contextmanager
def nested_run(
    original: Agent[Any], wrapped: Agent[Any], turn: Turn, call_id: str
) -> Iterator[None]:
    """Within: the run ``original``'s agent tool starts is ``wrapped``'s, a run of ``turn``, and
    its calls' ids are qualified by ``call_id``."""
    NestingRunner.install()
    nested = _NESTED.set(_Nested(original, wrapped, turn))
    scope = CALL_SCOPE.set(f"{CALL_SCOPE.get()}{call_id}/")
    try:
        yield
    finally:
        CALL_SCOPE.reset(scope)
        _NESTED.reset(nested)


class NestingRunner(AgentRunner):
    """The SDK's runner, for every run but a wrapped agent-tool call's (see the module)."""

    def __init__(self, inner: AgentRunner) -> None:
        self.inner = inner

    @classmethod
    def install(cls) -> None:
        """The default runner, wrapping the one in place (unless it is one already)."""
        current = get_default_agent_runner()
        if not isinstance(current, cls):
            set_default_agent_runner(cls(current))

    async def run(self, starting_agent: Agent[Any], input: Any, **kwargs: Any) -> Any:
        nested = _take(starting_agent)
        if nested is None:
            return await self.inner.run(starting_agent, input, **kwargs)
        token = _NESTED.set(None)  # a run this one starts is the SDK's again
        try:
            result = self._streamed(nested, input, kwargs)
            async for _event in result.stream_events():
                pass
            return result
        finally:
            _NESTED.reset(token)

    def run_streamed(
        self, starting_agent: Agent[Any], input: Any, **kwargs: Any
    ) -> RunResultStreaming:
        nested = _take(starting_agent)
        if nested is None:
            return self.inner.run_streamed(starting_agent, input, **kwargs)
        token = _NESTED.set(None)
        try:
            return self._streamed(nested, input, kwargs)
        finally:
            _NESTED.reset(token)

    def run_sync(self, starting_agent: Agent[Any], input: Any, **kwargs: Any) -> Any:
        return self.inner.run_sync(starting_agent, input, **kwargs)

    def _streamed(self, nested: _Nested, input: Any, kwargs: dict[str, Any]) -> RunResultStreaming:
        result = self.inner.run_streamed(nested.wrapped, input, **kwargs)

        def stop() -> None:
            if not result.is_complete:
                result.cancel("immediate")

        if nested.turn.stopping:  # the stop came while the agent-tool call began
            stop()
        else:
            nested.turn.on_stop.append(stop)  # the turn's: bounded by its calls
        return result


def _take(starting_agent: Agent[Any]) -> _Nested | None:
    nested = _NESTED.get()
    if nested is None or nested.original is not starting_agent:
        return None
    return nested
