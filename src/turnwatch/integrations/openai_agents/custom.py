"""The SDK's custom tools (``CustomTool``: a raw string input, not JSON): each call a turnwatch
call of the run's turn, under the model's call id.

The SDK runs a custom tool's ``on_invoke_tool`` in this process, outside any function tool:
unwrapped, a stop never saw the call, and the SDK's cancel stopped it halfway. Wrapped, a call
is of the class the tool is given (``tool_class`` or ``classes=``), else the runner's default
(``mutating``: awaited); ``process`` for an async one that starts its commands with
``run_command``, as a function tool.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agents import CustomTool
from agents.tool_context import ToolContext

from turnwatch.integrations.openai_agents.local import RunCall, result_of
from turnwatch.integrations.wrappers import RUN_TURN

__all__ = ["wrapped_custom"]


def wrapped_custom(tool: CustomTool, call: RunCall) -> CustomTool:
    """``tool`` whose calls run as turnwatch calls (``call``) of the run's turn; outside a
    wrapped run, the tool's own."""
    invoke = tool.on_invoke_tool

    async def run(ctx: ToolContext[Any], text: str) -> Any:
        return await result_of(invoke(ctx, text))

    async def on_invoke_tool(ctx: ToolContext[Any], text: str) -> Any:
        turn = RUN_TURN.get()
        if turn is None:
            return await run(ctx, text)
        return await call(
            turn, tool.name, ctx.tool_call_id, {"input": text}, lambda: run(ctx, text)
        )

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)
