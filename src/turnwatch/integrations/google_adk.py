"""Google's Agent Development Kit, wrapped: the ADR's stop for an ADK ``Runner``'s tool calls.
Requires the ``google-adk`` extra.

ADK 2.x stops a run with ``Runner.run_async(…, abort_signal=asyncio.Event)``: the run's task is
cancelled, and every call left without an answer is sealed with an ``INVOCATION_ABORTED`` error
response (not replayed on resume). What it does not do (``../shared/frameworks-next.md``,
measured offline): a sync tool runs on the event loop by default, so the abort is not seen until
it returns; with the tool thread pool the tool's subprocess is left running; and a write in
flight is cancelled half done and sealed as aborted.

Wrapped:

- :class:`TurnwatchPlugin` (an ADK ``BasePlugin``, given to the runner's app) makes each tool
  call of a wrapped run a turnwatch call of the run's turn, where ADK runs it (the tool's
  ``run_async``, wrapped by the plugin's ``before_tool_callback``: ADK's confirmation gate
  comes first, its error callbacks see the tool's errors), by its class: the plugin's
  ``classes`` mapping by tool name, else ``turnwatch_class`` in the tool's ``custom_metadata``,
  else ``extension`` for an MCP tool (ADK's ``McpToolset``) and ``default_class`` for the
  others. An unknown class is refused when the plugin is built (for the tools it is given), or
  when the tool is first called (one it was not given, an MCP server's). A ``process`` tool is a
  function tool that starts its commands with :func:`turnwatch.integrations.wrappers.run_command`
  (async) or :func:`~turnwatch.integrations.wrappers.run_command_sync` (sync): contained, ended
  within the grace window. A sync tool runs in a thread, never on the loop.
- :class:`StoppableRunner` runs ``runner.run_async`` as one turn of a session (``session=``,
  ADK's ``session_id`` unless given). ``await runtime.abort(session)`` is the stop: calls in
  flight are walked by class (read-only ones discarded, process ones ended within the grace
  window, mutating and extension ones awaited, an MCP tool's server told of the stop, its
  cancel naming the call's own request), each gets its function response with its real
  outcome (:func:`~turnwatch.integrations.wrappers.stopped_words`; a write completed after the
  stop, its real result), and only then is ADK's own ``abort_signal`` set: the model is not asked
  again, and ADK has no unanswered call to seal as aborted. A stop while the model runs sets it
  at once. The caller's own ``abort_signal`` set, or the task reading the run cancelled from
  outside, is the same stop (sources ``framework`` and ``cancel``).
- A call that ADK's tool confirmation holds (``require_confirmation``, or the tool's own
  ``request_confirmation()``) is a permission the turn waits on
  (:mod:`~turnwatch.integrations.google_adk_confirmations`): the run ends asking, the turn does
  not settle, and the next ``run_async`` whose message answers it goes on in that turn. A stop
  while it waits settles the turn, and a confirmation sent after it is refused: the tool never
  runs. A message that answers none abandons the wait (the turn is stopped, as a Stop would).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.mcp_tool.mcp_tool import McpTool
from google.adk.tools.tool_context import ToolContext
from google.adk.utils._sync_runner import _use_executor_for_sync_callables
from mcp import ClientSession

from turnwatch.integrations import google_adk_confirmations as confirmations
from turnwatch.integrations.daemon_threads import DAEMONS
from turnwatch.integrations.wrappers import (
    CLASS_KEY,
    RUN_TURN,
    ToolClassError,
    declared_class,
    dispatcher,
    join_current_trace,
    stop_on_cancel,
    stopped_words,
    tap_session,
    warn_unwrapped,
)
from turnwatch.runtime.model import Outcome, StopSource, ToolClass, TurnOutcome
from turnwatch.runtime.runtime import Runtime
from turnwatch.runtime.turn import Turn

__all__ = ["CLASS_KEY", "StoppableRunner", "ToolClassError", "TurnwatchPlugin"]

_DONE = (Outcome.COMPLETED, Outcome.COMPLETED_AFTER_STOP)


class TurnwatchPlugin(BasePlugin):
    """Makes each tool call of a :class:`StoppableRunner`'s run a turnwatch call by its class
    (see the module); outside one, ADK runs it as it would."""

    def __init__(
        self,
        runtime: Runtime,
        tools: Sequence[BaseTool] = (),
        *,
        classes: Mapping[str, ToolClass | str] | None = None,
        default_class: ToolClass | str = ToolClass.MUTATING,
        name: str = "turnwatch",
    ) -> None:
        super().__init__(name=name)
        self.default = declared_class(
            "default_class", {CLASS_KEY: default_class}, ToolClass.MUTATING
        )
        self.named = {
            n: declared_class(n, {CLASS_KEY: c}, self.default) for n, c in (classes or {}).items()
        }
        self.dispatch = dispatcher(runtime.host, "TurnwatchPlugin")
        #: Each tool's class, as read when the plugin was built or the tool first called.
        self.classes: dict[str, ToolClass] = {}
        for tool in tools:
            self.learn(tool)

    def class_of(self, tool: BaseTool) -> ToolClass:
        """``tool``'s class: by name, else its metadata, else by its kind (an MCP tool is an
        extension). A ``process`` tool must be a function tool (its commands started with
        ``run_command`` or ``run_command_sync``)."""
        if tool.name in self.named:
            cls = self.named[tool.name]
        else:
            kind = ToolClass.EXTENSION if isinstance(tool, McpTool) else self.default
            cls = declared_class(tool.name, tool.custom_metadata, kind)
        if cls is ToolClass.PROCESS and getattr(tool, "func", None) is None:
            raise ToolClassError(
                f"tool {tool.name!r}: a process tool is a function tool that starts its commands "
                "with run_command (async) or run_command_sync (sync)"
            )
        return cls

    def learn(self, tool: BaseTool) -> ToolClass:
        """Read ``tool``'s class and register it on the host (once per name)."""
        cls = self.class_of(tool)
        self.dispatch.add_tools([tool.name])
        self.classes[tool.name] = self.dispatch.classes[tool.name] = cls
        return cls

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> None:
        """Answers nothing: in a wrapped run, the call runs where ADK runs it (its confirmation
        gate first, its error callbacks after), through the tool's ``run_async``, wrapped here
        once per tool object: a turnwatch call there."""
        if RUN_TURN.get() is not None and type(tool) is not BaseTool:
            # (A bare BaseTool is ADK's stand-in for a tool the model named that does not
            # exist: nothing to run, ADK answers "not found".)
            self.wrap(tool)

    def wrap(self, tool: BaseTool) -> None:
        """Make ``tool``'s ``run_async`` a turnwatch call in a wrapped run (ADK's own call
        outside one); once per tool object."""
        if getattr(tool.run_async, _MARK, False):
            return
        if tool.name not in self.classes:
            self.learn(tool)
        if isinstance(tool, McpTool):
            _tap_sessions(tool)
            self.dispatch.host_tool(tool.name)  # its request needs the call's stop
        original = tool.run_async

        async def run_async(*, args: dict[str, Any], tool_context: ToolContext) -> Any:
            turn, plugin = RUN_TURN.get(), _PLUGIN.get()
            if turn is None or plugin is None:
                return await original(args=args, tool_context=tool_context)
            return await plugin.call(turn, tool, original, args, tool_context)

        setattr(run_async, _MARK, True)
        tool.run_async = run_async  # type: ignore[method-assign]

    async def call(
        self,
        turn: Turn,
        tool: BaseTool,
        run: Callable[..., Awaitable[Any]],
        args: dict[str, Any],
        ctx: ToolContext,
    ) -> Any:
        """One call of ``turn``: ``run(args=, tool_context=)`` (the tool's own ``run_async``)
        under its class; what it returned, or the words of the stop that reached it. What it
        raised is raised (ADK's error callbacks see it)."""
        cls = self.classes.get(tool.name) or self.learn(tool)
        join_current_trace(turn)  # ADK's execute_tool span, if the run had none of its own
        call_id = ctx.function_call_id or turn.next_call_id()
        # A run its user's confirmation allowed is the prompt's call (by the request's id);
        # one told "no" is a call of its own (its id may have run already, asking).
        ours = self.dispatch.renamed.pop((turn.session.id, call_id), None)
        if ours is None and ctx.tool_confirmation is not None:
            ours = turn.next_call_id()
        value, error, result = await self.dispatch.run(
            turn, tool.name, cls, ours or call_id, args, _run_tool, (run, args, ctx)
        )
        if result.outcome in _DONE:
            return value  # its real result, after the stop too
        if error is not None and result.outcome is Outcome.FAILED:
            raise error
        return {"error": stopped_words(result.outcome, result.output)}


#: Marks a tool's ``run_async`` as the plugin's wrapper.
_MARK = "_turnwatch_wrapped"
#: The plugin of the wrapped run whose code runs here (set with ``RUN_TURN``).
_PLUGIN: contextvars.ContextVar[TurnwatchPlugin | None] = contextvars.ContextVar(
    "turnwatch_adk_plugin", default=None
)


def _tap_sessions(tool: McpTool) -> None:
    """Each session ``tool``'s session manager hands out, tapped (:func:`tap_session`): a
    ``tools/call`` sent from a wrapped call goes under an id the stop's cancel names. ADK opens
    sessions per call (pooled by headers), so the manager's ``create_session`` is wrapped, once;
    the manager is ADK's private ``_mcp_session_manager`` (google-adk pinned, tested)."""
    manager = tool._mcp_session_manager  # noqa: SLF001
    if getattr(manager.create_session, _MARK, False):
        return
    create = manager.create_session

    async def create_session(*args: Any, **kwargs: Any) -> Any:
        session = await create(*args, **kwargs)
        if isinstance(session, ClientSession):
            tap_session(session)
        return session

    setattr(create_session, _MARK, True)
    manager.create_session = create_session  # type: ignore[method-assign]


async def _run_tool(req: tuple[Callable[..., Awaitable[Any]], dict[str, Any], ToolContext]) -> Any:
    """The tool itself; a sync function in a thread of ours (ADK's own binding for its tool
    thread pool, which comes before its run config's), never on the event loop."""
    run, args, ctx = req
    with _use_executor_for_sync_callables(DAEMONS):
        return await run(args=args, tool_context=ctx)


class StoppableRunner:
    """An ADK ``Runner`` whose runs stop the ADR's way on ``runtime`` (its plugins holding a
    :class:`TurnwatchPlugin`)."""

    def __init__(self, runner: Any, runtime: Runtime) -> None:
        plugins = getattr(getattr(runner, "plugin_manager", None), "plugins", [])
        ours = [p for p in plugins if isinstance(p, TurnwatchPlugin)]
        if not ours:
            raise TypeError("StoppableRunner: give the runner a TurnwatchPlugin (plugins=[…])")
        self.plugin: TurnwatchPlugin = ours[0]
        self.runner, self.runtime = runner, runtime
        warn_unwrapped("StoppableRunner: the code of", _local_code(getattr(runner, "agent", None)))
        self.dispatch = dispatcher(runtime.host, "StoppableRunner")
        #: Sessions whose turn waits on its user's confirmations: the run answering goes on.
        self._awaiting: dict[str, Turn] = {}

    async def run_async(
        self,
        *,
        user_id: str,
        session_id: str,
        session: str | None = None,
        abort_signal: asyncio.Event | None = None,
        new_message: Any = None,
        **kwargs: Any,
    ) -> AsyncGenerator[Any, None]:
        """``runner.run_async`` as one turn of ``session`` (``session_id`` unless given): its
        events, up to where a stop ends the run (after the answers of the calls it reached,
        or at once if it came while the model ran); a run that ends asking its user to confirm
        a call leaves the turn waiting, and the run whose ``new_message`` answers goes on in it.
        ``kwargs`` go to ADK's ``run_async``."""
        sid = session or session_id
        turn, new_message = await self._turn(sid, new_message)
        loop = asyncio.get_running_loop()
        native = asyncio.Event()  # ADK's own abort: set once nothing of a tools step runs
        stopped = False

        def cut() -> None:
            if not turn.in_flight:
                native.set()

        def on_stop() -> None:
            nonlocal stopped
            stopped = True
            # A turn of the loop later: the walk has reached the calls by then.
            loop.call_soon(cut)

        turn.on_stop.append(on_stop)
        watch = loop.create_task(self._watch(abort_signal, turn)) if abort_signal else None
        running, plugin = RUN_TURN.set(turn), _PLUGIN.set(self.plugin)
        events = self.runner.run_async(
            user_id=user_id,
            session_id=session_id,
            new_message=new_message,
            abort_signal=native,
            **kwargs,
        )
        try:
            async for event in events:
                confirmations.ask(turn, self.dispatch, event)
                yield event
                if stopped:
                    cut()  # the answers of the calls it reached are ADK's history now
        except (asyncio.CancelledError, GeneratorExit):
            # Cancelled, or its reader left (a ``break``, a closed connection): nobody reads
            # the run any more. That is a stop (source ``cancel``), bounded.
            self.dispatch.unclaimed(sid)
            await stop_on_cancel(self.runtime, turn)
            raise
        except BaseException:
            self.dispatch.unclaimed(sid)
            await turn.finish(TurnOutcome.FAILED)
            raise
        finally:
            await events.aclose()
            if watch is not None:
                watch.cancel()
            turn.on_stop.remove(on_stop)
            RUN_TURN.reset(running)
            _PLUGIN.reset(plugin)
        self.dispatch.unclaimed(sid)
        if not turn.stopping and confirmations.waits(turn):
            self.dispatch.awaits(self._awaiting, turn)  # until its user answers, or a stop
            return
        await turn.finish()

    async def _turn(self, session: str, message: Any) -> tuple[Turn, Any]:
        """The run's turn, and the message ADK is given: one that answers the confirmations a
        turn waits on goes on in it (one the stop came before, a rejection); any other, while
        they wait, abandons them (their turn stopped) and starts a new turn."""
        waiting = self._awaiting.get(session)
        # A malformed answer raises here: the turn still waits for a readable one.
        message, answered = confirmations.answer(self.runtime, self.dispatch, session, message)
        self._awaiting.pop(session, None)
        if waiting is not None and answered and not waiting.stopping and not waiting.settled.done():
            return waiting, message
        if waiting is not None and not waiting.settled.done():
            if not waiting.stopping:
                await self.runtime.abort(session, source=StopSource.FRAMEWORK, turn=waiting.id)
            await asyncio.shield(waiting.settled)
        turn = self.runtime.start_turn(session, parent=RUN_TURN.get())
        join_current_trace(turn)  # the span the run is called in
        return turn, message

    async def _watch(self, signal: asyncio.Event, turn: Turn) -> None:
        """The caller's own ``abort_signal``: set, it is the stop (source ``framework``)."""
        await signal.wait()
        if not turn.stopping and not turn.settled.done():
            await self.runtime.abort(turn.session.id, source=StopSource.FRAMEWORK, turn=turn.id)


#: ADK's code executors that run the model's code on this machine (a subprocess, a container),
#: outside any tool call: no plugin callback sees it, so no stop reaches it.
_LOCAL_EXECUTORS = frozenset({"UnsafeLocalCodeExecutor", "ContainerCodeExecutor"})


def _local_code(root: Any) -> dict[str, str]:
    """The agents of ``root``'s tree (itself and its sub-agents) whose code executor runs the
    model's code here: name → the executor's kind."""
    found: dict[str, str] = {}
    todo, seen = [root], set()
    while todo:
        agent = todo.pop()
        if agent is None or id(agent) in seen:
            continue
        seen.add(id(agent))
        executor = getattr(agent, "code_executor", None)
        if executor is not None and {k.__name__ for k in type(executor).__mro__} & _LOCAL_EXECUTORS:
            found[str(getattr(agent, "name", "?"))] = type(executor).__name__
        todo.extend(getattr(agent, "sub_agents", None) or ())
    return found
