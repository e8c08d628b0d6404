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

from turnwatch import names
from turnwatch.integrations.google_adk import StoppableRunner, TurnwatchPlugin
from turnwatch.integrations.wrappers import Dispatcher, run_command
from turnwatch.runtime import MemorySink, Runtime
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


# --- tool confirmations ---

CONFIRM = "adk_request_confirmation"
OK = says(types.Part(text="ok"))


class Writes:
    """A write that requires confirmation (ADK's gate), and what it wrote."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.written: list[str] = []
        self.release = asyncio.Event()
        self.release.set()

        async def write(text: str) -> str:
            """a write the user must confirm"""
            self.started.append(text)
            await self.release.wait()
            self.written.append(text)
            return "written"

        self.tool = FunctionTool(write, require_confirmation=True)
        self.tool.custom_metadata = {"turnwatch_class": "mutating"}


def asked(events: list[Any]) -> list[types.FunctionCall]:
    """The confirmations the run asked for."""
    return [c for e in events for c in e.get_function_calls() if c.name == CONFIRM]


def confirm(request: types.FunctionCall, confirmed: bool) -> types.Content:
    """The user's answer to ``request``, as ADK's web UI sends it."""
    response = types.FunctionResponse(
        name=CONFIRM, id=request.id, response={"confirmed": confirmed}
    )
    return types.Content(role="user", parts=[types.Part(function_response=response)])


def kinds(sink: MemorySink, call_id: str | None) -> list[str]:
    return [e.kind for e in sink if e.call == call_id]


def outcome(sink: MemorySink, call_id: str | None) -> object:
    """How the call ended, as the ledger has it."""
    (ended,) = [e for e in sink if e.kind == names.TOOL_FINISHED and e.call == call_id]
    return ended.attrs.get("outcome")


def responses(events: list[Any], call_id: str) -> list[dict[str, Any]]:
    """Every function response to ``call_id`` in the history, in order."""
    return [
        dict(r.response or {})
        for e in events
        for r in e.get_function_responses()
        if r.id == call_id
    ]


def kept(app: StoppableRunner, session: str) -> list[object]:
    """What the wrapper keeps of ``session``'s calls (slots, renamed ids)."""
    return kept_of(app.dispatch, session)


def kept_of(d: Dispatcher, session: str) -> list[object]:
    return [k for k in [*d.slots, *d.renamed] if k[0] == session]


async def reply(
    app: StoppableRunner, sid: str, request: types.FunctionCall, confirmed: bool = True
) -> list[Any]:
    """The run the user's answer to ``request`` makes: its events."""
    return await consume(
        app.run_async(user_id="u", session_id=sid, new_message=confirm(request, confirmed))
    )


async def ask_to_write(rt: Runtime, w: Writes, *steps: types.Content) -> tuple[Any, Any, str, Any]:
    """A run whose model asks to write: it ends asking for the write's confirmation."""
    runner, app = wrapped(rt, [w.tool], model(says(call("w1", "write", text="a")), *steps))
    sid = await new_session(runner)
    events = await consume(app.run_async(user_id="u", session_id=sid, new_message=HI))
    (request,) = asked(events)
    return runner, app, sid, request
