"""What the pydantic-ai tests (and others that borrow them) share: a model that asks for tool calls
once, the tools' ways to run (a write in chunks, a read that never answers), the processes a call
left, and an agent whose one tool needs approval."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.conftest import this_run
from turnwatch.integrations.pydantic_ai import StoppableAgent
from turnwatch.runtime.tools.proctree import CALL_MARKER

TERM_IGNORING_TREE = "trap '' TERM; (trap '' TERM; sleep 60) & sleep 60; wait"
CHUNKS, CHUNK = 20, b"x" * 4096


def calls(*parts: ToolCallPart) -> Callable[[list[ModelMessage], AgentInfo], ModelResponse]:
    """A model that asks for ``parts`` once, then answers with what the tools returned."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=list(parts))
        returned = [
            p.content
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        return ModelResponse(parts=[TextPart(repr(returned))])

    return model


def marked_alive() -> list[psutil.Process]:
    """Processes a turnwatch call started that still run (their environment names the call)."""
    out = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
            if CALL_MARKER in env and this_run(env) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def begun(path: Path) -> bool:
    """The write has its first chunk on disk (and is not whole yet, CHUNKS being many)."""
    return path.exists() and path.stat().st_size > 0


async def wait_forever() -> str:
    """A read-only call that never answers (a hung mount, asynchronously)."""
    await asyncio.sleep(3600)
    return "never"


async def write_in_chunks(path: str) -> str:
    """A large Write: twenty chunks, the loop free between them (where a cancel lands)."""
    with open(path, "wb") as f:
        for _ in range(CHUNKS):
            f.write(CHUNK)
            f.flush()
            await asyncio.sleep(0.02)
    return "written"


def approval_agent(target: Path) -> tuple[Agent[None, str | DeferredToolRequests], list[str]]:
    seen: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("delete", {"path": str(target)}, "a1")])
        for m in messages:
            if isinstance(m, ModelRequest):
                seen.extend(str(p.content) for p in m.parts if isinstance(p, ToolReturnPart))
        return ModelResponse(parts=[TextPart("ok")])

    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(model), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def delete(path: str) -> str:
        os.unlink(path)
        return "deleted"

    return agent, seen


async def approve(wrapped: StoppableAgent[Any, Any], first: Any, approved: bool = True) -> Any:
    """The user clicks Approve (or Deny) on the run's one prompt: the next run, with the answer."""
    return await wrapped.run(
        message_history=first.all_messages(),
        session="s",
        deferred_tool_results=DeferredToolResults(approvals={"a1": approved}),
    )
