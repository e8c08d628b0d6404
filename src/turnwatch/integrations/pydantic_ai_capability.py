"""One wrapped pydantic-ai run's capability: the run's tool calls, and the output function it
ends with, run as turnwatch calls of its turn; the turn's stop cancels the run the framework's
own way (``RunContext.cancel()`` of that run alone).

An output function (``output_type=fn``, ``ToolOutput(fn)``, ``TextOutput(fn)``) runs once the
model ended the run through the output tool (or with text), outside any tool call: unwrapped,
the stop reported the turn settled while it ran, and the framework's cancel stopped it halfway.
It is a turnwatch call under the output tool call's id (one of the turn's own for text), of the
class its tool's metadata says, else the wrapper's ``default_class`` (``mutating``: awaited).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, RunCancelled
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.output import OutputContext
from pydantic_ai.tools import RunContext, ToolDefinition

from turnwatch.integrations.pydantic_ai_mcp import tap_mcp_tool
from turnwatch.integrations.wrappers import declared_class, join_current_trace
from turnwatch.runtime.model import Outcome, ToolClass, ToolResult
from turnwatch.runtime.turn import Turn

if TYPE_CHECKING:
    from turnwatch.integrations.pydantic_ai import StoppableAgent

__all__ = ["PAUSES", "TurnCapability"]

#: What a tool raises to end its call asking its user (``ApprovalRequired``) or deferring itself
#: to outside the run (``CallDeferred``): its call ran until then, and the framework goes on.
PAUSES = (ApprovalRequired, CallDeferred)


@dataclasses.dataclass
class TurnCapability(AbstractCapability[Any]):
    """One run's capability: its tool calls and its output function go through the turn's
    calls."""

    owner: StoppableAgent[Any, Any]
    turn: Turn
    #: The run's context, once it runs: a stop cancels this run alone through it (never a
    #: token the user may share between runs).
    run_ctx: RunContext[Any] | None = None
    stopped: bool = False

    def stop(self) -> None:
        """The turn's stop reached the run (the walk follows in the same step)."""
        self.stopped = True
        if self.run_ctx is not None:
            self.run_ctx.cancel()

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> Any:
        self.run_ctx = ctx
        if self.stopped:  # the stop came as the run started
            ctx.cancel()
        # The run's span (pydantic-ai's invoke_agent, when instrumented) is the stop's parent.
        join_current_trace(self.turn)
        try:
            return await handler()
        finally:
            self.run_ctx = None  # the run's whole context: not kept past the run

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: Any,
    ) -> Any:
        owner, call_id = self.owner, call.tool_call_id
        if tool_def.name not in owner.classes and tap_mcp_tool(ctx, tool_def.name):
            owner.dispatch.host_tool(tool_def.name)  # its request needs the call's stop
        # The run an approval allowed of a tool that asked its user itself: the prompt's call.
        ours = owner.dispatch.renamed.pop((self.turn.session.id, call_id), call_id)
        value, error, result = await owner.dispatch.run(
            self.turn,
            tool_def.name,
            owner.class_of(tool_def),
            ours,
            args if isinstance(args, dict) else {},
            handler,
            args,
            PAUSES,
        )
        if isinstance(error, PAUSES):
            raise error  # it ran until it asked its user (or deferred itself): the framework's
        return await _answered(ctx, call_id, value, error, result)

    async def wrap_output_process(
        self, ctx: RunContext[Any], *, output_context: OutputContext, output: Any, handler: Any
    ) -> Any:
        if not output_context.has_function or ctx.partial_output:
            return await handler(output)  # nothing of the user's runs (or a partial, streamed)
        part, tool_def = output_context.tool_call, output_context.tool_def
        name = tool_def.name if tool_def is not None else output_context.function_name
        name = name or "output"
        call_id = part.tool_call_id if part is not None else self.turn.next_call_id()
        cls = declared_class(
            name, tool_def.metadata if tool_def is not None else None, self.owner.default_class
        )
        if cls is ToolClass.PROCESS:  # its commands (run_command) run on the host
            self.owner.dispatch.host_tool(name)
        args = part.args_as_dict() if part is not None else {}
        value, error, result = await self.owner.dispatch.run(
            self.turn, name, cls, call_id, args, handler, output
        )
        return await _answered(ctx, call_id, value, error, result)


async def _answered(
    ctx: RunContext[Any], call_id: str, value: Any, error: BaseException | None, result: ToolResult
) -> Any:
    """What the framework is given of a call: its value, or what it raised; a call the stop
    refused, discarded or aborted ends the run the framework's way."""
    if result.outcome is Outcome.COMPLETED:
        return value
    if error is not None:
        raise error
    ctx.cancel()
    await asyncio.sleep(0)
    raise RunCancelled(f"tool call {call_id} was {result.outcome}")
