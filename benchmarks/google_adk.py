"""Google ADK, native against wrapped (``StoppableRunner`` + ``TurnwatchPlugin``), side by side.

Per tool call: an ``LlmAgent`` whose scripted model asks for 50 no-op calls at once, run by ADK's
``Runner`` natively, with a plugin whose ``before_tool_callback`` does nothing (any plugin costs
ADK's dispatch per call), and wrapped per class (no sink: an unobserved runtime records nothing),
interleaved; each run in a session of its own. Turnwatch's share is what the wrapper adds over the
empty plugin, of ADK's own per-call cost.

A stop: the model asks for a shell command (``sleep``) and a write at once; native, ADK's
``abort_signal`` set (its tool thread pool on, so the sync tool does not block the loop); wrapped,
``rt.abort()``. For each: stop → settle, the processes left running, the writes begun and cut
short, and the calls ADK sealed ``INVOCATION_ABORTED`` (their answer says nothing of what they did).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

import psutil
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, ToolThreadPoolConfig
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import InMemoryRunner
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.function_tool import FunctionTool
from google.genai import types
from pydantic import Field

from benchmarks import common
from benchmarks.common import fmt_s, median, table
from turnwatch.integrations.google_adk import StoppableRunner, TurnwatchPlugin
from turnwatch.integrations.wrappers import run_command
from turnwatch.runtime import LocalHost, Runtime

CALLS = 50
ROUNDS = 30
STOPS = 5
ABORTED = "INVOCATION_ABORTED"
HI = types.Content(role="user", parts=[types.Part(text="go")])


class Cycling(BaseLlm):
    """A scripted model whose answers come round again: one per model call, every run alike
    (ADK's ``MockModel`` runs out, and keeps every request)."""

    model: str = "cycling"
    answers: list[types.Content] = Field(default_factory=list)
    at: int = 0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        content = self.answers[self.at % len(self.answers)]
        self.at += 1
        yield LlmResponse(content=content)


def _asks(calls: list[tuple[str, str, dict[str, Any]]]) -> Cycling:
    parts = [
        types.Part(function_call=types.FunctionCall(id=cid, name=name, args=args))
        for cid, name, args in calls
    ]
    done = types.Content(role="model", parts=[types.Part(text="done")])
    return Cycling(answers=[types.Content(role="model", parts=parts), done])


class _Empty(BasePlugin):
    """A plugin whose tool callback does nothing."""

    async def before_tool_callback(self, **_kwargs: Any) -> Any:
        return None


def _classed(fn: Callable[..., Any], cls: str | None) -> FunctionTool:
    t = FunctionTool(fn)
    if cls is not None:
        t.custom_metadata = {"turnwatch_class": cls}
    return t


def _runner(tools: list[BaseTool], llm: BaseLlm, plugins: list[BasePlugin]) -> InMemoryRunner:
    agent = LlmAgent(name="a", model=llm, tools=list(tools))
    return InMemoryRunner(app=App(name="app", root_agent=agent, plugins=plugins))


async def _session(runner: InMemoryRunner) -> str:
    s = await runner.session_service.create_session(app_name="app", user_id="u")
    return str(s.id)


async def _drain(events: Any) -> None:
    async for _ in events:
        pass


async def per_call() -> dict[str, float]:
    """Seconds per call: native, with an empty plugin, and wrapped per class."""

    async def noop() -> str:
        """does nothing"""
        return ""

    calls: list[tuple[str, str, dict[str, Any]]] = [(f"c{i}", "noop", {}) for i in range(CALLS)]

    def native(plugins: list[BasePlugin]) -> Callable[[str], Any]:
        runner = _runner([_classed(noop, None)], _asks(calls), plugins)

        async def run(_s: str) -> None:
            sid = await _session(runner)
            await _drain(runner.run_async(user_id="u", session_id=sid, new_message=HI))

        return run

    def wrapped(cls: str) -> Callable[[str], Any]:
        rt = Runtime(LocalHost(), max_running=CALLS)  # every call admitted at once, as natively
        tools: list[BaseTool] = [_classed(noop, cls)]
        runner = _runner(tools, _asks(calls), [TurnwatchPlugin(rt, tools)])
        app = StoppableRunner(runner, rt)

        async def run(_s: str) -> None:
            sid = await _session(runner)
            await _drain(app.run_async(user_id="u", session_id=sid, new_message=HI))

        return run

    return await common.per_call(
        {
            "native": native([]),
            "native + an empty plugin": native([_Empty(name="empty")]),
            "wrapped, read_only": wrapped("read_only"),
            "wrapped, mutating": wrapped("mutating"),
        },
        calls=CALLS,
        rounds=ROUNDS,
    )


class _Stop:
    """One side's stop, ``STOPS`` times: the settle times, and what each stop left."""

    def __init__(self, wrapped: bool) -> None:
        self.wrapped = wrapped
        self.seconds = "63" if wrapped else "64"  # each side's processes told apart
        self.settle: list[float] = []
        self.left = self.sealed = self.cut = 0
        self.started = self.written = 0

    def tools(self) -> list[BaseTool]:
        seconds = self.seconds

        async def write(text: str) -> str:
            """a write that takes a moment"""
            self.started += 1
            await asyncio.sleep(0.2)
            self.written += 1
            return "written"

        async def sh() -> str:
            """a shell command"""
            return (await run_command(["sleep", seconds])).output

        def native_sh() -> str:
            """a shell command, as an ADK tool runs one (a thread of its pool)"""
            subprocess.run(["sleep", seconds], check=False)
            return "done"

        native_sh.__name__ = "sh"
        shell = _classed(sh, "process") if self.wrapped else _classed(native_sh, None)
        return [shell, _classed(write, "mutating")]

    async def once(self) -> None:
        llm = _asks([("p1", "sh", {}), ("w1", "write", {"text": "a"})])
        rt = Runtime(LocalHost(), grace_s=1.0)
        tools = self.tools()
        plugins: list[BasePlugin] = [TurnwatchPlugin(rt, tools)] if self.wrapped else []
        runner = _runner(tools, llm, plugins)
        sid = await _session(runner)
        self.started = self.written = 0
        abort = asyncio.Event()
        if self.wrapped:
            events = StoppableRunner(runner, rt).run_async(
                user_id="u", session_id=sid, new_message=HI
            )
        else:
            pool = RunConfig(tool_thread_pool_config=ToolThreadPoolConfig())
            events = runner.run_async(
                user_id="u", session_id=sid, new_message=HI, abort_signal=abort, run_config=pool
            )
        run = asyncio.ensure_future(_drain(events))
        await common.until(lambda: common.sleeping(self.seconds) and self.started)
        t0 = time.perf_counter()
        if self.wrapped:
            await rt.abort(sid)
        else:
            abort.set()
        await run
        self.settle.append(time.perf_counter() - t0)
        self.left += len(common.sleeping(self.seconds))
        session = await runner.session_service.get_session(
            app_name="app", user_id="u", session_id=sid
        )
        assert session is not None
        self.sealed += sum(
            len(e.get_function_responses()) for e in session.events if e.error_code == ABORTED
        )
        self.cut += self.started - self.written  # begun, and never finished: half a write
        for p in common.sleeping(self.seconds):
            with contextlib.suppress(psutil.Error):
                p.kill()


async def stops() -> list[list[object]]:
    sides = {"native (abort_signal)": _Stop(False), "wrapped (rt.abort)": _Stop(True)}
    for _ in range(STOPS):
        for side in sides.values():
            await side.once()
        await asyncio.sleep(0.3)  # a native write cut short may still be under way: let it end
    return [
        [
            name,
            fmt_s(median(s.settle)),
            f"{s.left} of {STOPS}",
            f"{s.cut} of {STOPS}",
            f"{s.sealed} of {2 * STOPS}",
        ]
        for name, s in sides.items()
    ]


async def main() -> str:
    # ADK says, once a run, that the scripted model reports no token usage: not this table's.
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    rows = common.shares(await per_call(), "native + an empty plugin")
    head = ["", "per call", "over native", "turnwatch's share (over the empty plugin)"]
    return "\n".join(
        [
            "## Google ADK: native and wrapped\n",
            f"Per tool call ({CALLS} no-op calls per run, each run in a new session, median of "
            f"{ROUNDS} runs of each, shuffled in each round; no sink):\n",
            table(head, rows),
            "",
            f"A stop with a process (`sleep`) and a write in flight (median of {STOPS}):\n",
            table(
                [
                    "",
                    "stop → settle",
                    "processes left running",
                    "writes cut short",
                    "calls ADK sealed INVOCATION_ABORTED",
                ],
                await stops(),
            ),
            "",
        ]
    )


if __name__ == "__main__":
    print(asyncio.run(main()))
