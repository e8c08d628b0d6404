"""What the Google ADK tests share: the tools they run (a TERM-ignoring process tree, a slow read,
a write), a scripted model (ADK's own ``MockModel``), a runner wrapped or native, and what a test
reads of a run (its history, its answers, its unanswered calls)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.cli.agent_test_runner import MockModel
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools.function_tool import FunctionTool
from google.genai import types

from turnwatch.integrations.google_adk import StoppableRunner, TurnwatchPlugin
from turnwatch.integrations.wrappers import run_command
from turnwatch.runtime import Runtime
from turnwatch.runtime.tools.proctree import CALL_MARKER

TERM_IGNORING_TREE = "trap '' TERM; (trap '' TERM; sleep 60) & sleep 60; wait"
ABORTED = "INVOCATION_ABORTED"


def call(cid: str, name: str, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(id=cid, name=name, args=args))


def says(*parts: types.Part) -> types.Content:
    return types.Content(role="model", parts=list(parts))


HI = types.Content(role="user", parts=[types.Part(text="go")])
STEP = says(call("r1", "look", q="x"), call("p1", "sh"), call("w1", "write", text="a"))


def classed(fn: Callable[..., Any], cls: str | None) -> FunctionTool:
    """A function tool with its turnwatch class in its metadata (as ADK tools carry it)."""
    t = FunctionTool(fn)
    if cls is not None:
        t.custom_metadata = {"turnwatch_class": cls}
    return t


class Tools:
    """The three tools, and what they did."""

    def __init__(self, *, native: bool = False, write_s: float = 0.5) -> None:
        self.started: list[str] = []  # the write's side effect began
        self.written: list[str] = []
        self.spawned: list[subprocess.Popen[bytes]] = []
        #: The write goes on only once this holds (a test's stop under way): it is in flight
        #: when the stop comes however slowly the other tools start on a loaded machine.
        self.hold: Callable[[], bool] = lambda: True

        async def look(q: str) -> str:
            """a slow read"""
            await asyncio.sleep(30)
            return "found"

        async def sh() -> str:
            """a shell command that ignores SIGTERM"""
            return (await run_command(["bash", "-c", TERM_IGNORING_TREE])).output

        def native_sh() -> str:
            """a shell command that ignores SIGTERM, as an ADK tool runs one (in a thread of
            its tool pool; nothing ties the command to the call)"""
            env = {**os.environ, CALL_MARKER: "native/p1"}
            proc = subprocess.Popen(["bash", "-c", TERM_IGNORING_TREE], env=env)
            self.spawned.append(proc)
            proc.wait()
            return "done"

        native_sh.__name__ = "sh"

        async def write(text: str) -> str:
            """a write that takes a while"""
            self.started.append(text)
            await asyncio.sleep(write_s)
            while not self.hold():
                await asyncio.sleep(0.005)
            self.written.append(text)
            return "written"

        self.all = [
            classed(look, "read_only"),
            classed(native_sh, None) if native else classed(sh, "process"),
            classed(write, "mutating"),
        ]


class Counted(MockModel):
    """ADK's scripted model, counting how often it is asked."""

    asked: int = 0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.asked += 1
        async for r in super().generate_content_async(llm_request, stream):
            yield r


def stopping(rt: Runtime, session: str) -> Callable[[], bool]:
    """Whether a stop reached ``session``'s turn (or it settled)."""

    def held() -> bool:
        live = rt.session(session).live
        return live is None or live.stopping

    return held


def model(*steps: types.Content) -> Counted:
    scripted = MockModel.create([*steps, says(types.Part(text="done"))])
    return Counted(model=scripted.model, responses=scripted.responses)


async def new_session(runner: InMemoryRunner) -> str:
    s = await runner.session_service.create_session(app_name="app", user_id="u")
    return str(s.id)


async def history(runner: InMemoryRunner, sid: str) -> list[Any]:
    s = await runner.session_service.get_session(app_name="app", user_id="u", session_id=sid)
    assert s is not None
    return list(s.events)


def answers(events: list[Any]) -> dict[str, dict[str, Any]]:
    """Each call's function response in the history, by call id."""
    return {str(r.id): dict(r.response or {}) for e in events for r in e.get_function_responses()}


def unanswered(events: list[Any]) -> set[str]:
    asked = {str(c.id) for e in events for c in e.get_function_calls()}
    return asked - answers(events).keys()


def wrapped(rt: Runtime, tools: Sequence[FunctionTool], llm: BaseLlm) -> tuple[InMemoryRunner, Any]:
    agent = LlmAgent(name="a", model=llm, tools=list(tools))
    runner = InMemoryRunner(
        app=App(name="app", root_agent=agent, plugins=[TurnwatchPlugin(rt, tools)])
    )
    return runner, StoppableRunner(runner, rt)


async def consume(events: AsyncIterator[Any]) -> list[Any]:
    return [e async for e in events]
