"""The OpenAI Agents SDK under the ADR's stop: each run a turnwatch turn, each function tool call a
turnwatch call.

``pip install 'turnwatch[openai-agents]'``. The only module that imports the SDK (``agents``).

    rt = Runtime(LocalHost(), sink=Ledger("ledger.sqlite3"))
    runner = StoppableRunner(Agent(name="dev", model=model, tools=[...]), rt)
    result = await runner.run("fix the build", session="s1")   # elsewhere: await rt.abort("s1")

The SDK's gaps, and what the wrapper does about each:

- ``Runner.run`` has no stop token: every run is a streamed run, and a stop is
  ``cancel("immediate")`` of it. ``run()`` then waits for turnwatch's own record of the calls in
  flight, not for the SDK, and raises :class:`RunStopped` once the turn has settled.
- Sync function tools run through ``asyncio.to_thread``, whose threads outlive a cancel and keep
  the interpreter from exiting: the wrapper sets the running loop's default executor to one of
  daemon threads (for the loop's life: ``to_thread`` elsewhere gets daemon threads too).
- Each ``FunctionTool`` of the agent, and of every agent its handoffs reach (recursively, cycles
  allowed; a ``handoff()`` object's agent once the handoff happens), runs under the policy of its
  class, from :func:`tool_class` or ``classes=`` (else ``default_class``, ``mutating``, so a tool
  nobody classified is never abandoned): ``read_only`` raced and discarded, ``process`` tools
  (async, starting commands with :func:`run_command`) terminated after the grace window,
  ``mutating`` and ``extension`` awaited. An agent used ``as_tool`` is one call of its parent's
  (class ``mutating`` unless said): its own tools are not wrapped.
- ``needs_approval`` tools: the run's interruptions are turnwatch permission prompts, and the turn
  stays live until the run is resumed. An approval given after a stop (``RunState.approve``,
  whoever calls it) is refused when the run resumes: the call is rejected, and the ledger
  records ``permission.late``.
- Hosted tools (web search, file search, code interpreter) and MCP servers' tools run where
  turnwatch cannot reach them: observed, not enforced (the README's table).
- The SDK traces a run its own way (not OpenTelemetry): turnwatch's spans of the run (the stop,
  ``execute_tool`` per call) take the SDK trace's id, and :class:`FunctionSpans` (a trace
  processor the wrapper adds once) turns the SDK's function spans into OpenTelemetry spans of
  that trace, so one trace shows the run's tool calls as the SDK saw them and as the stop did.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import inspect
from collections.abc import AsyncGenerator, Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson
from agents import (
    Agent,
    FunctionTool,
    Handoff,
    Runner,
    RunState,
    ToolApprovalItem,
    add_trace_processor,
)
from agents.result import RunResultStreaming
from agents.tool_context import ToolContext
from agents.tracing import FunctionSpanData, Trace, TracingProcessor
from agents.tracing.spans import Span as SdkSpan
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from turnwatch import names
from turnwatch.integrations.wrappers import (
    CLASS_KEY,
    DAEMONS,
    RUN_TURN,
    STOPPED,
    CommandAbortedError,
    CommandResult,
    ToolClassError,
    declared_class,
    dispatcher,
    require_async_process,
    run_command,
    stop_on_cancel,
)
from turnwatch.runtime.gate import Answer
from turnwatch.runtime.model import Outcome, StopSource, ToolClass, TurnOutcome, TurnwatchError
from turnwatch.runtime.runtime import Runtime
from turnwatch.runtime.session import Turn

__all__ = [
    "CLASS_KEY",
    "STOPPED",
    "CommandAbortedError",
    "CommandResult",
    "FunctionSpans",
    "RunStopped",
    "StoppableRunner",
    "StoppableStream",
    "ToolClassError",
    "run_command",
    "tool_class",
    "typed_invoker",
]


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


class RunStopped(TurnwatchError):
    """The run was stopped; its turn has settled (every call released) when this is raised."""


def tool_class(tool: FunctionTool, cls: ToolClass | str) -> FunctionTool:
    """Mark ``tool`` with its turnwatch class (the SDK's tools carry no metadata of their own)."""
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
        # Every agent reachable by handoffs at construction (cycles allowed) is wrapped once:
        # id → (the agent, kept so its id is never another's, and its clone). Bounded by that
        # graph: an agent a handoff returns at run time is wrapped for that handoff alone.
        self._wrapped: dict[int, tuple[Agent[Any], Agent[Any]]] = {}
        self.agent = self._wrap(agent, self._wrapped)
        unknown = set(self._given) - set(self.classes)
        if unknown:
            raise ToolClassError(f"classes= names tools the agent does not have: {sorted(unknown)}")
        self._awaiting: dict[str, Turn] = {}  # sessions whose turn waits for approvals
        FunctionSpans.install()

    def _wrap(
        self, agent: Agent[Any], memo: dict[int, tuple[Agent[Any], Agent[Any]]]
    ) -> Agent[Any]:
        """``agent`` with its function tools run as turnwatch calls, and its handoffs' agents
        wrapped the same way (a handoff to an agent reached only at run time, when it happens).
        ``memo``: the agents wrapped so far, so each is wrapped once and a cycle ends."""
        known = memo.get(id(agent))
        if known is not None and known[0] is agent:
            return known[1]
        clone = agent.clone()
        memo[id(agent)] = (agent, clone)  # before the handoffs: a cycle ends here
        tools: list[Any] = []
        for tool in agent.tools:
            if isinstance(tool, FunctionTool):
                self._classify(tool)  # the original: tool_class() marked it, not its copy
                tool = dataclasses.replace(tool, on_invoke_tool=self._invoker(tool))
            tools.append(tool)
        clone.tools = tools
        clone.handoffs = [self._wrap_handoff(h, memo) for h in agent.handoffs]
        return clone

    def _classify(self, tool: FunctionTool) -> None:
        declared = self._given.get(tool.name, getattr(tool, CLASS_KEY, None))
        cls = declared_class(tool.name, {CLASS_KEY: declared}, self._default)
        require_async_process(tool.name, cls, _function(tool), f"{__name__}.run_command")
        if self.classes.get(tool.name, cls) is not cls:
            raise ToolClassError(
                f"tool {tool.name!r}: two agents' tools of that name have different classes"
            )
        if tool.name not in self.classes:
            self.classes[tool.name] = cls
            self.dispatch.add_tools([tool.name])

    def _wrap_handoff(self, handoff: Any, memo: dict[int, tuple[Agent[Any], Agent[Any]]]) -> Any:
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

    def _invoker(self, tool: FunctionTool) -> Any:
        """``tool``'s invoker: :meth:`_invoke` bound to it (see :func:`typed_invoker`)."""
        return typed_invoker(functools.partial(self._invoke, tool))

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
            turn.traceparent = _traceparent(result.trace)
        return StoppableStream(self, turn, result)

    async def _invoke(self, tool: FunctionTool, ctx: ToolContext[Any], input_json: str) -> Any:
        """The SDK's call of ``tool``, run as a turnwatch call of the run's turn."""
        turn = RUN_TURN.get()
        if turn is None:  # the wrapped agent run some other way: the SDK's behaviour
            return await tool.on_invoke_tool(ctx, input_json)
        key = (turn.session.id, ctx.tool_call_id)

        async def handler(_args: Any) -> Any:
            slot = self.dispatch.slots.get(key)  # the host's dispatcher runs it: a process call
            value = await tool.on_invoke_tool(ctx, input_json)
            if slot is not None and slot.aborted is not None:
                # The SDK turned run_command's CommandAbortedError into an error message for
                # the model; the call was aborted, and its result is the ledger's.
                raise CommandAbortedError(slot.aborted.error or "stopped")
            return value

        value, error, result = await self.dispatch.run(
            turn, tool.name, self.classes[tool.name], key[1], _args(input_json), handler, None
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
        self._awaiting[turn.session.id] = turn
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


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        parsed = orjson.loads(raw or "{}")
    except (orjson.JSONDecodeError, TypeError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _traceparent(sdk_trace: Any) -> str | None:
    """The SDK's trace (``trace_<32 hex>``) as a W3C ``traceparent``: the stop and turnwatch's
    ``execute_tool`` spans then carry the SDK trace's id, so a backend that also receives the
    SDK's spans (through an OpenTelemetry processor of its own) shows one trace."""
    ids = _trace_ids(getattr(sdk_trace, "trace_id", None))
    return None if ids is None else f"00-{ids[0]:032x}-{ids[1]:016x}-01"


def _trace_ids(sdk_trace_id: object) -> tuple[int, int] | None:
    """The OpenTelemetry trace id of an SDK trace id, and the id of its (virtual) root span:
    the SDK's spans are not OpenTelemetry spans, so the root's id is derived from the trace's."""
    if not isinstance(sdk_trace_id, str) or not sdk_trace_id.startswith("trace_"):
        return None
    hex_id = sdk_trace_id.removeprefix("trace_")
    if (
        len(hex_id) != 32
        or not all(c in "0123456789abcdef" for c in hex_id)
        or set(hex_id) == {"0"}
    ):
        return None
    parent = hashlib.blake2b(sdk_trace_id.encode(), digest_size=8).digest()
    return int(hex_id, 16), int.from_bytes(parent, "big") or 1


class FunctionSpans(TracingProcessor):
    """The SDK's function spans (``FunctionSpanData``) as OpenTelemetry spans
    ``openai_agents.function {name}`` in the OpenTelemetry trace of their run, the one the stop's
    spans join: with the SDK's start, end and error, and its span ids as attributes. The tool's
    input and output are never copied (turnwatch keeps no arguments unless asked). Other SDK
    spans are left to the SDK's exporters.

    :class:`StoppableRunner` installs one, once per process (``add_trace_processor``, beside the
    SDK's own processors); with the SDK's tracing disabled, it sees nothing.
    """

    _installed: FunctionSpans | None = None

    def __init__(self, tracer: trace.Tracer | None = None) -> None:
        self.tracer = tracer or trace.get_tracer("turnwatch.openai_agents")

    @classmethod
    def install(cls) -> FunctionSpans:
        """The process's bridge, added to the SDK's trace processors the first time."""
        if cls._installed is None:
            cls._installed = cls()
            add_trace_processor(cls._installed)
        return cls._installed

    def on_span_end(self, span: SdkSpan[Any]) -> None:
        data = span.span_data
        ids = _trace_ids(span.trace_id)
        if not isinstance(data, FunctionSpanData) or ids is None:
            return
        root = SpanContext(ids[0], ids[1], is_remote=True, trace_flags=TraceFlags(1))
        otel = self.tracer.start_span(
            f"{names.SPAN_SDK_FUNCTION_PREFIX} {data.name}",
            context=trace.set_span_in_context(NonRecordingSpan(root)),
            start_time=_ns(span.started_at),
            attributes={
                names.A_GENAI_TOOL_NAME: data.name,
                names.A_SDK_SPAN_ID: span.span_id,
                names.A_SDK_PARENT_ID: span.parent_id or "",
            },
        )
        error = span.error
        if error:
            otel.set_attribute(names.A_ERROR_TYPE, "tool_error")
            otel.set_status(Status(StatusCode.ERROR, str(error.get("message", ""))))
        otel.end(_ns(span.ended_at))

    def on_trace_start(self, trace: Trace) -> None:
        return

    def on_trace_end(self, trace: Trace) -> None:
        return

    def on_span_start(self, span: SdkSpan[Any]) -> None:
        return

    def shutdown(self) -> None:
        return

    def force_flush(self) -> None:
        return


def _ns(iso: str | None) -> int | None:
    """An SDK timestamp (ISO 8601) as Unix nanoseconds; None leaves the time to the SDK."""
    if not iso:
        return None
    try:
        return int(datetime.fromisoformat(iso).timestamp() * 1e9)
    except ValueError:
        return None
