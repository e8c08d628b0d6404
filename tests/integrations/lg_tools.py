"""What the LangGraph tests share: the tools they run (a TERM-ignoring process tree, a slow
read, a write) and their graph, the calls the scripted model asks for, and what a test reads of
a run (its unanswered calls, a stream read to its end across a stop)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator, Callable
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt import ToolNode

from tests.conftest import until
from tests.integrations.lg_graphs import Scripted, agent_graph
from tests.integrations.procs import marked_alive
from turnwatch.integrations.wrappers import run_command
from turnwatch.runtime import Receipt, Runtime
from turnwatch.runtime.tools.proctree import CALL_MARKER

TERM_IGNORING_TREE = "trap '' TERM; (trap '' TERM; sleep 60) & sleep 60; wait"
CALLS = [
    {"id": "r1", "name": "look", "args": {"q": "x"}},
    {"id": "p1", "name": "sh", "args": {}},
    {"id": "w1", "name": "write", "args": {"text": "a"}},
]


def classed(cls: str) -> Callable[[BaseTool], BaseTool]:
    """The tool's turnwatch class, in its metadata (as LangChain tools carry it)."""

    def mark(t: BaseTool) -> BaseTool:
        t.metadata = {**(t.metadata or {}), "turnwatch_class": cls}
        return t

    return mark


class Tools:
    """The three tools, and what they did."""

    def __init__(self, *, native: bool = False) -> None:
        self.started: list[str] = []  # the write's side effect began
        self.written: list[str] = []
        self.model_calls = 0
        self.spawned: list[subprocess.Popen[bytes]] = []

        @classed("read_only")
        @tool
        async def look(q: str) -> str:
            """a slow read"""
            await asyncio.sleep(30)
            return "found"

        @classed("process")
        @tool
        async def sh() -> str:
            """a shell command that ignores SIGTERM"""
            return (await run_command(["bash", "-c", TERM_IGNORING_TREE])).output

        @tool("sh")
        def native_sh() -> str:
            """a shell command that ignores SIGTERM, as a LangGraph tool runs one (in a thread
            of the pool; nothing ties the command to the call)"""
            env = {**os.environ, CALL_MARKER: "native/p1"}
            proc = subprocess.Popen(["bash", "-c", TERM_IGNORING_TREE], env=env)
            self.spawned.append(proc)
            proc.wait()
            return "done"

        @classed("mutating")
        @tool
        async def write(text: str) -> str:
            """a write that takes a while"""
            self.started.append(text)
            await asyncio.sleep(0.5)
            self.written.append(text)
            return "written"

        self.all: list[BaseTool] = [look, native_sh if native else sh, write]

    def graph(self, node: ToolNode, checkpointer: Any) -> Any:
        model = Scripted(
            messages=iter(
                [AIMessage(content="", tool_calls=CALLS)] + [AIMessage(content="done")] * 3
            )
        )

        def asked() -> None:
            self.model_calls += 1

        return agent_graph(node, model, checkpointer, on_model=asked)


def unanswered(messages: list[Any]) -> set[str]:
    """Tool calls of the history no ToolMessage answers (an invalid chat history)."""
    asked = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    answered = {str(m.tool_call_id) for m in messages if isinstance(m, ToolMessage)}
    return {str(i) for i in asked} - answered


async def stopped_while_read(rt: Runtime, session: str, stream: AsyncIterator[Any]) -> list[Any]:
    """What a wrapped stream gave, read to its end while the session was stopped once its
    process tree ran (nothing of it outlives ``abort()``)."""
    got: list[Any] = []

    async def consume() -> None:
        async for item in stream:
            got.append(item)

    run = asyncio.ensure_future(consume())
    await until(lambda: len(marked_alive(session)) >= 3, what="the tree to start")
    assert await rt.abort(session) is Receipt.ACCEPTED
    assert marked_alive(session) == []
    await asyncio.wait_for(run, 10)
    return got
