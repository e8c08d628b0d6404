"""The wrapper's runner: each run of the agent a turnwatch turn, each function tool call a
turnwatch call (the package's docstring says what it does about each of the SDK's gaps)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import orjson
from agents import (
    Agent,
    ApplyPatchTool,
    ComputerTool,
    CustomTool,
    FunctionTool,
    Handoff,
    LocalShellTool,
    Runner,
    RunState,
    ShellTool,
    ToolApprovalItem,
)
from agents.result import RunResultStreaming
from agents.tool_context import ToolContext
from mcp import ClientSession

from turnwatch.integrations.daemon_threads import DAEMONS
from turnwatch.integrations.openai_agents.apply_patch import install as install_patch_ids
from turnwatch.integrations.openai_agents.apply_patch import wrapped_patch
from turnwatch.integrations.openai_agents.computer import install as install_computer_calls
from turnwatch.integrations.openai_agents.computer import wrapped_computer
from turnwatch.integrations.openai_agents.custom import wrapped_custom
from turnwatch.integrations.openai_agents.nesting import CALL_SCOPE, agent_of, nested_run
from turnwatch.integrations.openai_agents.shell import shell_class, wrapped_shell
from turnwatch.integrations.openai_agents.spans import FunctionSpans, traceparent
from turnwatch.integrations.openai_agents.stream import StoppableStream
from turnwatch.integrations.wrappers import (
    CLASS_KEY,
    RUN_TURN,
    STOPPED,
    ToolClassError,
    UnwrappedToolWarning,
    declared_class,
    dispatcher,
    require_async_process,
    tap_session,
)
from turnwatch.runtime.gate import Answer
from turnwatch.runtime.model import Outcome, ToolClass, TurnOutcome
from turnwatch.runtime.runtime import Runtime
from turnwatch.runtime.turn import Turn

__all__ = ["StoppableRunner", "UnwrappedToolWarning", "tool_class", "typed_invoker"]


_T = TypeVar(
    "_T",
    bound=FunctionTool
    | ShellTool
    | LocalShellTool
    | ApplyPatchTool
    | CustomTool
    | ComputerTool[Any],
)

_Pair = tuple[Agent[Any], Agent[Any]]  # an agent, and its wrapped clone


_INVOKER_SIGNATURE = inspect.Signature(
    [
        inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation)
        for name, annotation in (("ctx", ToolContext), ("input_json", str))
    ]
)


def typed_invoker(invoke: Any) -> Any:
    """A tool invoker, its signature stated as objects. The SDK reads an invoker's signature on
    every call to choose the context it passes, and string annotations (PEP 563: this module's,
    and the SDK's own invokers') it parses with ``ast``: about 100 µs a call on this VM
    (``make bench``, the SDK section)."""
    typed = functools.partial(invoke)
    typed.__signature__ = _INVOKER_SIGNATURE  # type: ignore[attr-defined]
    return typed


def tool_class(tool: _T, cls: ToolClass | str) -> _T:
    """Mark ``tool`` (a function tool, a ``ShellTool``, a ``LocalShellTool``, an
    ``ApplyPatchTool``, a ``CustomTool`` or a ``ComputerTool``) with its turnwatch class (the
    SDK's tools carry no metadata of their own)."""
    setattr(tool, CLASS_KEY, declared_class(tool.name, {CLASS_KEY: cls}, ToolClass.MUTATING).value)
    return tool


class StoppableRunner:
    """Runs ``agent`` with the SDK's ``Runner``, each run a turn on ``runtime``."""

    def __init__(
        self,
        agent: Agent[Any],
        runtime: Runtime,
        *,
        default_class: ToolClass | str = ToolClass.MUTATING,
        classes: Mapping[str, ToolClass | str] | None = None,
    ) -> None:
        self.runtime = runtime
        self._default = declared_class(
            "default_class", {CLASS_KEY: default_class}, ToolClass.MUTATING
        )
        self._given = dict(classes or {})
        self.classes: dict[str, ToolClass] = {}
        self.dispatch = dispatcher(runtime.host, "StoppableRunner")
        # Every agent reachable by handoffs and agent tools at construction (cycles allowed) is
        # wrapped once:
        # id → (the agent, kept so its id is never another's, and its clone). Bounded by that
        # graph: an agent a handoff returns at run time is wrapped for that handoff alone.
        self._wrapped: dict[int, _Pair] = {}
        self._mcp = False  # whether an agent it wraps has MCP servers (their tools come later)
        self.agent = self._wrap(agent, self._wrapped)
        unknown = set(self._given) - set(self.classes)
        if unknown and not self._mcp:
            raise ToolClassError(f"classes= names tools the agent does not have: {sorted(unknown)}")
        for name in sorted(unknown):  # an MCP server's, perhaps: its class checked now
            if (
                declared_class(name, {CLASS_KEY: self._given[name]}, self._default)
                is ToolClass.PROCESS
            ):
                raise ToolClassError(f"tool {name!r}: an MCP server's tool runs no process of ours")
        self._awaiting: dict[str, Turn] = {}  # sessions whose turn waits for approvals
        FunctionSpans.install()

    def _wrap(self, agent: Agent[Any], memo: dict[int, _Pair]) -> Agent[Any]:
        """``agent`` with its function tools run as turnwatch calls, and its handoffs' and agent
        tools' agents wrapped the same way (a handoff to an agent reached only at run time, when
        it happens). ``memo``: the agents wrapped so far, each once, so a cycle ends."""
        known = memo.get(id(agent))
        if known is not None and known[0] is agent:
            return known[1]
        clone = agent.clone()
        memo[id(agent)] = (agent, clone)  # before the handoffs: a cycle ends here
        tools: list[Any] = []
        for tool in agent.tools:
            if isinstance(tool, (ShellTool, LocalShellTool)) and tool.executor is not None:
                self._classify(tool.name, shell_class(tool), tool.executor)
                tool = wrapped_shell(tool, self._call)
            elif isinstance(tool, ApplyPatchTool):
                self._classify(tool.name, getattr(tool, CLASS_KEY, None), None, processes=False)
                install_patch_ids()
                tool = wrapped_patch(tool, self._call)
            elif isinstance(tool, CustomTool):
                self._classify(tool.name, getattr(tool, CLASS_KEY, None), tool.on_invoke_tool)
                tool = wrapped_custom(tool, self._call)
            elif isinstance(tool, ComputerTool):
                self._classify(tool.name, getattr(tool, CLASS_KEY, None), None, processes=False)
                install_computer_calls()
                tool = wrapped_computer(tool, self._call)
            if isinstance(tool, FunctionTool):
                # The original: tool_class() marked it, not its copy.
                self._classify(tool.name, getattr(tool, CLASS_KEY, None), _function(tool))
                inner = agent_of(tool)  # an agent used as_tool: its tools are wrapped too
                nested = None if inner is None else (inner, self._wrap(inner, memo))
                tool = dataclasses.replace(tool, on_invoke_tool=self._invoker(tool, nested))
            tools.append(tool)
        clone.tools = tools
        clone.handoffs = [self._wrap_handoff(h, memo) for h in agent.handoffs]
        if agent.mcp_servers:
            self._mcp = True
            self._wrap_mcp(clone)
        return clone

    def _wrap_mcp(self, clone: Agent[Any]) -> None:
        """The SDK builds an MCP server's tools as each model turn begins (``get_mcp_tools``),
        never in ``agent.tools``: each is wrapped as it comes, an ``extension`` call (awaited at
        a stop, as the ADR classes MCP calls) unless ``classes=`` says otherwise. Unwrapped, a
        stop settled the turn while the server still ran the call. Each server's session is
        tapped as it is found connected (:func:`tap_session`; a server that reconnects, at the
        next model turn): the stop tells the server, naming the call's request."""
        built = clone.get_mcp_tools  # the SDK's own, bound to the clone

        async def get_mcp_tools(run_context: Any) -> list[Any]:
            tools = await built(run_context)
            for server in clone.mcp_servers:
                session = getattr(server, "session", None)
                if isinstance(session, ClientSession):
                    tap_session(session)
            return [self._mcp_tool(tool) for tool in tools]

        clone.get_mcp_tools = get_mcp_tools  # type: ignore[method-assign]

    def _mcp_tool(self, tool: Any) -> Any:
        if not isinstance(tool, FunctionTool):
            return tool
        if tool.name not in self.classes:
            given = self._given.get(tool.name, ToolClass.EXTENSION)
            self.classes[tool.name] = declared_class(tool.name, {CLASS_KEY: given}, self._default)
            self.dispatch.add_tools([tool.name])
            self.dispatch.host_tool(tool.name)  # its request needs the call's stop
        return dataclasses.replace(tool, on_invoke_tool=self._invoker(tool))

    def _classify(
        self, name: str, marked: ToolClass | str | None, fn: object, *, processes: bool = True
    ) -> None:
        """The class of tool ``name`` (``classes=``, else what the tool is ``marked``, else the
        default); ``fn``: what runs its calls (a process tool's must be async); ``processes``
        False: a tool that runs no process of turnwatch's, never ``process``."""
        cls = declared_class(name, {CLASS_KEY: self._given.get(name, marked)}, self._default)
        if cls is ToolClass.PROCESS and not processes:
            raise ToolClassError(f"tool {name!r} runs no process of turnwatch's: never process")
        require_async_process(name, cls, fn, f"{__name__}.run_command")
        if self.classes.get(name, cls) is not cls:
            raise ToolClassError(
                f"tool {name!r}: two agents' tools of that name have different classes"
            )
        if name not in self.classes:
            self.classes[name] = cls
            self.dispatch.add_tools([name])

    def _wrap_handoff(self, handoff: Any, memo: dict[int, _Pair]) -> Any:
        if isinstance(handoff, Agent):
            return self._wrap(handoff, memo)
        if not isinstance(handoff, Handoff):
            return handoff
        invoke = handoff.on_invoke_handoff

        async def to_wrapped(ctx: Any, input_json: str) -> Any:
            target = await invoke(ctx, input_json)
            if not isinstance(target, Agent):
                return target
            return self._wrap(target, dict(self._wrapped))  # kept for this handoff alone

        return dataclasses.replace(handoff, on_invoke_handoff=to_wrapped)

    def _invoker(self, tool: FunctionTool, nested: _Pair | None = None) -> Any:
        """``tool``'s invoker: :meth:`_invoke` bound to it (see :func:`typed_invoker`);
        ``nested``: the agent it runs, when ``as_tool`` made it, and that agent wrapped."""
        return typed_invoker(functools.partial(self._invoke, tool, nested))

    async def run(
        self, input: str | list[Any] | RunState[Any], *, session: str, **kwargs: Any
    ) -> RunResultStreaming:
        """One turn of ``session`` (or the turn its approvals kept live), streamed to its end.

        Raises :class:`RunStopped` when a stop (``runtime.abort(session)``, or the SDK's own
        ``cancel()`` of the run) ended it, once every call it started is released. A cancel of
        the task awaiting this is a stop too (source ``cancel``, bounded by the grace window).
        """
        stream = self.run_streamed(input, session=session, **kwargs)
        async for _event in stream.stream_events():
            pass
        return stream.result

    def run_streamed(
        self, input: str | list[Any] | RunState[Any], *, session: str, **kwargs: Any
    ) -> StoppableStream:
        """``Runner.run_streamed`` as one turn of ``session``: consume its
        :meth:`~StoppableStream.stream_events`; its ``cancel()`` is the stop."""
        turn = self._awaiting.pop(session, None)
        if isinstance(input, RunState):
            self._answer(session, input)
        fresh = turn is None or turn.settled.done()
        if turn is None or fresh:
            turn = self.runtime.start_turn(session, parent=RUN_TURN.get())
        asyncio.get_running_loop().set_default_executor(DAEMONS)  # sync tools' threads: daemons
        token = RUN_TURN.set(turn)
        try:
            result = Runner.run_streamed(self.agent, input, **kwargs)
        except BaseException:
            if fresh:  # nothing of it ran: no call of the turn can be in flight
                turn.settle(TurnOutcome.FAILED)
            else:  # a resumed turn keeps its prompts: it still waits for the run
                self._awaiting[session] = turn
            raise
        finally:
            RUN_TURN.reset(token)
        if turn.traceparent is None:
            turn.traceparent = traceparent(result.trace)
        return StoppableStream(self, turn, result)

    async def _invoke(
        self, tool: FunctionTool, nested: _Pair | None, ctx: ToolContext[Any], input_json: str
    ) -> Any:
        """The SDK's call of ``tool``, run as a turnwatch call of the run's turn."""
        turn = RUN_TURN.get()
        if turn is None:  # the wrapped agent run some other way: the SDK's behaviour
            return await tool.on_invoke_tool(ctx, input_json)

        async def run() -> Any:
            if nested is None:
                return await tool.on_invoke_tool(ctx, input_json)
            with nested_run(*nested, turn, CALL_SCOPE.get() + ctx.tool_call_id):
                return await tool.on_invoke_tool(ctx, input_json)

        return await self._call(turn, tool.name, ctx.tool_call_id, _args(input_json), run)

    async def _call(
        self,
        turn: Turn,
        name: str,
        call_id: str,
        args: dict[str, Any],
        run: Callable[[], Awaitable[Any]],
    ) -> Any:
        """``run()`` (the SDK's own execution of a call of ``name``) as a turnwatch call of
        ``turn``: what the SDK is given back."""
        ours = CALL_SCOPE.get() + call_id

        async def handler(_args: Any) -> Any:
            # The SDK turns run_command's CommandAbortedError (or an MCP server's answer to
            # the cancel) into an error message for its model; the host's dispatcher still
            # ends the call aborted (the slot says so), and the result is the ledger's.
            return await run()

        value, error, result = await self.dispatch.run(
            turn, name, self.classes[name], ours, args, handler, None
        )
        if result.outcome is Outcome.COMPLETED:
            return value
        if error is not None:
            raise error
        # Refused, discarded or aborted: the run is being cancelled; the model never sees this.
        return f"TOOL_ABORTED: {result.outcome}"

    def ask(self, turn: Turn, items: Sequence[ToolApprovalItem]) -> None:
        """Each approval the run waits for, a permission prompt on the turn, which stays live
        until the run is resumed."""
        self.dispatch.awaits(self._awaiting, turn)
        for item in items:
            call_id = item.call_id
            if call_id is None or item.tool_name is None:
                continue
            slot = self.dispatch.slot(turn.session.id, call_id)
            slot.handle = turn.request(
                item.tool_name,
                _args(item.arguments),
                call_id=call_id,
                tool_class=self.classes.get(item.tool_name, ToolClass.EXTENSION).value,
                ask_permission=True,
            )

    def _answer(self, session: str, state: RunState[Any]) -> None:
        """The user's answers in ``state``, through the runtime: one a stop came before is
        turned into a rejection before the SDK can run the call."""
        context = state._context  # noqa: SLF001 - the SDK keeps the approvals there
        if context is None:
            return
        for item in state.get_interruptions():
            call_id, name = item.call_id, item.tool_name
            if call_id is None or name is None:
                continue
            approved = context.is_tool_approved(name, call_id)
            if approved is None:
                continue  # not answered: the run will ask again
            try:
                said = self.runtime.answer_permission(session, call_id, approved)
            except LookupError:
                continue  # not a prompt of ours
            if said is Answer.LATE:
                state.reject(item, rejection_message=STOPPED)
            if said is not Answer.GRANTED:
                self.dispatch.slots.pop((session, call_id), None)


def _function(tool: FunctionTool) -> object:
    """The function ``function_tool`` wrapped (the SDK's ``__wrapped__``); a tool made by hand
    has none, and its async invoker is what runs."""
    try:
        return tool.__wrapped__
    except AttributeError:
        return tool.on_invoke_tool


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        parsed = orjson.loads(raw or "{}")
    except (orjson.JSONDecodeError, TypeError):
        return {}
    return parsed if isinstance(parsed, dict) else {}
