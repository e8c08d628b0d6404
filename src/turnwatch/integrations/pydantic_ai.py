"""pydantic-ai under the ADR's stop: each run a turnwatch turn, each tool call a turnwatch call.

``pip install 'turnwatch[pydantic-ai]'``. The only module that imports pydantic-ai.

    rt = Runtime(LocalHost(), sink=Ledger("ledger.sqlite3"))
    agent = StoppableAgent(Agent(model, tools=[...]), rt)
    result = await agent.run("fix the build", session="s1")   # elsewhere: await rt.abort("s1")

Every tool runs under the policy of its class, from its metadata (``{"turnwatch_class":
"process"}``) or ``default_class`` (``mutating``, so a tool nobody classified is never abandoned):

- ``read_only``: raced; at a stop its result is discarded. It runs in the framework's own task
  (no task of turnwatch's: the cheapest call), which the stop cancels. Sync tools run in daemon
  threads, so an abandoned one no longer keeps the interpreter from exiting (pydantic-ai #7692).
- ``process``: async tools that start commands with :func:`run_command`: a cgroup or process
  group per call, SIGTERM at the stop, the grace window, then SIGKILL; the output is kept.
- ``mutating`` and ``extension`` (tools of other toolsets, such as MCP servers): awaited. The
  framework's cancel does not reach them: they run in the runtime's task, and the turn settles
  only once they returned. An ``MCPToolset``'s server is told of the stop, its cancel naming
  the call's own request (:mod:`.pydantic_ai_mcp`).

An output function (``output_type=fn``) is a call too, under the output tool call's id, of its
tool's class, else ``default_class`` (:mod:`.pydantic_ai_capability`).

A stop is ``rt.abort(session)`` from anywhere (the UI, the control socket, the watchdog): it
cancels the run the framework's own way (``RunContext.cancel()`` of that run alone) and returns
when every call is released; ``run()`` then raises ``RunCancelled``. A cancel of the framework's
own (a ``cancellation_token=`` of yours, ``RunContext.cancel()``, ``timeout=``) runs the same walk
(source ``framework``), and so does a cancel of the task awaiting ``run()`` (source ``cancel``).
Approvals (``requires_approval=True``) are turnwatch permission prompts: a run that ends asking
for them keeps its turn live ("processing") until they are answered through the next
``run(deferred_tool_results=...)``; an answer after a stop is refused, the run gets
``ToolDenied``, and the ledger records ``permission.late``. A tool that asks its user itself
(``raise ApprovalRequired`` until ``ctx.tool_call_approved``) is the same prompt: its first run
ended asking (completed), and the approved run is the prompt's call, under ``<id>:resumed``.

``iter()``, ``run_stream()`` and ``run_stream_events()`` are the framework's own, as turns too:
the same keywords, the same stop (``RunCancelled`` where you iterate); leaving the block before
the run's end is a stop (source ``cancel``), not a turn left live.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any, Generic, TypeVar

from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    ToolApproved,
    ToolDenied,
)
from pydantic_ai.agent import AgentRunEvents
from pydantic_ai.exceptions import RunCancelled, UserError
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.result import StreamedRunResult
from pydantic_ai.run import AgentRun, AgentRunResult
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import FunctionToolset

from turnwatch.integrations.daemon_threads import DAEMONS
from turnwatch.integrations.pydantic_ai_capability import TurnCapability
from turnwatch.integrations.wrappers import (
    CLASS_KEY,
    RUN_TURN,
    STOPPED,
    CommandAbortedError,
    CommandResult,
    ToolClassError,
    declared_class,
    dispatcher,
    require_async_process,
    resumed_id,
    run_command,
    stop_on_cancel,
)
from turnwatch.runtime.gate import Answer
from turnwatch.runtime.model import StopSource, ToolClass, TurnOutcome
from turnwatch.runtime.runtime import Runtime
from turnwatch.runtime.turn import Turn

__all__ = [
    "CLASS_KEY",
    "STOPPED",
    "CommandAbortedError",
    "CommandResult",
    "StoppableAgent",
    "ToolClassError",
    "run_command",
]

Deps = TypeVar("Deps")
Out = TypeVar("Out")


# --- the tools' classes, checked at construction ---


def tool_classes(agent: Agent[Any, Any], default: ToolClass) -> dict[str, ToolClass]:
    """Each function tool's class; tools of other toolsets (MCP servers…) are ``extension``."""
    classes: dict[str, ToolClass] = {}
    for toolset in agent.toolsets:
        if not isinstance(toolset, FunctionToolset):
            continue
        for name, tool in toolset.tools.items():
            cls = declared_class(name, tool.metadata, default)
            require_async_process(name, cls, tool.function, f"{__name__}.run_command")
            classes[name] = cls
    return classes


@dataclasses.dataclass
class _Run:
    """One wrapped run as its driver sees it: its turn, the keywords it runs with, its end."""

    turn: Turn
    capabilities: list[Any]
    deferred: DeferredToolResults | None
    #: The run's result, once it reached its end; None while it runs, or if it was left.
    result: AgentRunResult[Any] | None = None


class StoppableAgent(Generic[Deps, Out]):
    """A pydantic-ai ``Agent`` whose runs stop the ADR's way on ``runtime``."""

    def __init__(
        self,
        agent: Agent[Deps, Out],
        runtime: Runtime,
        *,
        default_class: ToolClass | str = ToolClass.MUTATING,
    ) -> None:
        self.agent, self.runtime = agent, runtime
        self.default_class = declared_class(
            "default_class", {CLASS_KEY: default_class}, ToolClass.MUTATING
        )
        self.classes = tool_classes(agent, self.default_class)
        self.dispatch = dispatcher(runtime.host, "StoppableAgent")
        self.dispatch.add_tools(list(self.classes))
        self._awaiting: dict[str, Turn] = {}  # sessions whose turn waits for approvals

    def class_of(self, tool_def: ToolDefinition) -> ToolClass:
        known = self.classes.get(tool_def.name)
        if known is not None:
            return known
        # A tool of another toolset (an MCP server, a dynamic toolset): extension unless it says.
        return declared_class(tool_def.name, tool_def.metadata, ToolClass.EXTENSION)

    async def run(
        self,
        user_prompt: Any = None,
        *,
        session: str,
        deferred_tool_results: DeferredToolResults | None = None,
        capabilities: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> AgentRunResult[Any]:
        """``Agent.run`` as one turn of ``session`` (or the turn its approvals kept live).

        Every keyword of ``Agent.run`` composes with the wrapper's: ``capabilities=`` run beside
        its own, and a ``cancellation_token=`` of the user's cancels the run as pydantic-ai does,
        which is then a stop with the same walk (source ``framework``); the wrapper's stop
        cancels this run alone, never the user's token. A run whose task is cancelled from
        outside is a stop too (source ``cancel``, bounded: :func:`stop_on_cancel`); one that
        raises (a bad keyword, a model error) settles its turn ``failed``.
        """
        async with self._turn(session, deferred_tool_results, capabilities) as run:
            run.result = await self.agent.run(
                user_prompt,
                deferred_tool_results=run.deferred,
                capabilities=run.capabilities,
                **kwargs,
            )
        return run.result

    @contextlib.asynccontextmanager
    async def iter(
        self,
        user_prompt: Any = None,
        *,
        session: str,
        deferred_tool_results: DeferredToolResults | None = None,
        capabilities: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AgentRun[Any, Any]]:
        """``Agent.iter`` as one turn of ``session``: the framework's ``AgentRun``, driven node by
        node by you. A stop raises ``RunCancelled`` from the step it lands in, once every call is
        released, as :meth:`run` does; leaving the block before the run's end is a stop too
        (source ``cancel``: nobody drives the run any more)."""
        async with self._turn(session, deferred_tool_results, capabilities) as run:
            async with self.agent.iter(
                user_prompt,
                deferred_tool_results=run.deferred,
                capabilities=run.capabilities,
                **kwargs,
            ) as agent_run:
                yield agent_run
            run.result = agent_run.result

    @contextlib.asynccontextmanager
    async def run_stream(
        self,
        user_prompt: Any = None,
        *,
        session: str,
        deferred_tool_results: DeferredToolResults | None = None,
        capabilities: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[StreamedRunResult[Any, Any]]:
        """``Agent.run_stream`` as one turn of ``session``: the framework's streamed result, whose
        tool calls (before the output streams, and those it runs once the stream is read) are
        the turn's calls. A stop raises ``RunCancelled`` where you read, once every call is
        released; leaving the block before the stream was read to its end is a stop too (source
        ``cancel``)."""
        async with self._turn(session, deferred_tool_results, capabilities) as run:
            async with self.agent.run_stream(
                user_prompt,
                deferred_tool_results=run.deferred,
                capabilities=run.capabilities,
                **kwargs,
            ) as streamed:
                yield streamed
            try:
                run.result = streamed.result
            except UserError:  # not read to its end, or its end raised: it has no result
                run.result = None

    @contextlib.asynccontextmanager
    async def run_stream_events(
        self,
        user_prompt: Any = None,
        *,
        session: str,
        deferred_tool_results: DeferredToolResults | None = None,
        capabilities: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AgentRunEvents[Any]]:
        """``Agent.run_stream_events`` as one turn of ``session``: the framework's events, its run
        in a task of its own. A stop raises ``RunCancelled`` where you iterate, once every call
        is released; the handle's ``cancel()`` is a stop (source ``framework``); leaving the
        block before the run's last event is a stop too (source ``cancel``)."""
        async with self._turn(session, deferred_tool_results, capabilities) as run:
            async with self.agent.run_stream_events(
                user_prompt,
                deferred_tool_results=run.deferred,
                capabilities=run.capabilities,
                **kwargs,
            ) as events:
                yield events
            run.result = events.result

    @contextlib.asynccontextmanager
    async def _turn(
        self,
        session: str,
        deferred: DeferredToolResults | None,
        capabilities: Sequence[Any] | None,
    ) -> AsyncIterator[_Run]:
        """One run of the agent, whichever way it is driven, as a turn of ``session``: the
        caller runs it with the :class:`_Run`'s keywords and sets its result once it ended."""
        turn = self._awaiting.pop(session, None)
        if deferred is not None and deferred.approvals:
            deferred = self._answer(session, deferred)
        if turn is None or turn.settled.done():
            turn = self.runtime.start_turn(session, parent=RUN_TURN.get())
        wrap = TurnCapability(self, turn)
        run = _Run(turn, [*(capabilities or ()), wrap], deferred)
        turn.on_stop.append(wrap.stop)
        running = RUN_TURN.set(turn)
        try:
            # The executor through the framework's context manager rather than its capability:
            # each run capability costs every hook of the run a context copy (measured).
            with Agent.using_thread_executor(DAEMONS):
                yield run
        except RunCancelled:
            if not turn.stopping:  # the framework's own cancel: the same walk
                await self.runtime.abort(session, source=StopSource.FRAMEWORK, turn=turn.id)
            await turn.finish()
            raise
        except (asyncio.CancelledError, GeneratorExit):
            # Cancelled, or the block closed under a generator whose reader left (a server's
            # client gone): nobody reads the run any more. A stop (source ``cancel``), bounded.
            self._unclaimed(session)
            await stop_on_cancel(self.runtime, turn)
            raise
        except BaseException:
            self._unclaimed(session)
            await turn.finish(TurnOutcome.FAILED)
            raise
        finally:
            turn.on_stop.remove(wrap.stop)
            RUN_TURN.reset(running)
        if run.result is None:
            # Left before its end (a ``break`` out of ``iter``, a stream not read to its end):
            # nobody drives the run any more. That is a stop, bounded, as a cancel is.
            self._unclaimed(session)
            await stop_on_cancel(self.runtime, turn)
            return
        output = run.result.output
        if isinstance(output, DeferredToolRequests) and output.approvals:
            self._ask(turn, output.approvals)
            self.dispatch.awaits(self._awaiting, turn)
            return
        self._unclaimed(session)
        await turn.finish()

    def _ask(self, turn: Turn, parts: Sequence[ToolCallPart]) -> None:
        """Each approval the run asks for, a permission prompt on the turn, open on return (so an
        answer given at once finds it)."""
        session = turn.session.id
        for part in parts:
            ours = part.tool_call_id
            if ours in turn.calls:  # its tool asked (ApprovalRequired): its first run had the id
                ours = resumed_id(part.tool_call_id)
                self.dispatch.renamed[(session, part.tool_call_id)] = ours
            slot = self.dispatch.slot(session, ours)
            slot.handle = turn.request(
                part.tool_name,
                part.args_as_dict(),
                call_id=ours,
                tool_class=self.classes.get(part.tool_name, ToolClass.EXTENSION).value,
                ask_permission=True,
            )

    def _answer(self, session: str, results: DeferredToolResults) -> DeferredToolResults:
        """The user's answers, through the runtime: one a stop came before becomes a denial."""
        approvals = dict(results.approvals)
        for call_id, answer in results.approvals.items():
            approved = answer is True or isinstance(answer, ToolApproved)
            # The prompt of a tool that asked itself is under the id of its run to come: named
            # while its turn waits; once a stop settled it, the one the runtime knows.
            asked = self.dispatch.renamed.get((session, call_id), call_id)
            for ours in dict.fromkeys((asked, resumed_id(call_id))):
                try:
                    said = self.runtime.answer_permission(session, ours, approved)
                except LookupError:
                    continue
                break
            else:
                continue  # not a prompt of ours
            if said is Answer.LATE:
                approvals[call_id] = ToolDenied(STOPPED)
            if said is not Answer.GRANTED:  # the framework will not run it: nothing to hand over
                self.dispatch.release(session, (ours,))
        return dataclasses.replace(results, approvals=approvals)

    def _unclaimed(self, session: str) -> None:
        """Approved calls the framework never ran (the run failed first) end, said so."""
        self.dispatch.unclaimed(session)
