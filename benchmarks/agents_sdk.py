"""The OpenAI Agents SDK, native against wrapped (StoppableRunner), side by side in one run.

Per tool call: a streamed run whose scripted model asks for 50 no-op tool calls at once, native
and wrapped per class (no sink), interleaved; the difference per call is what the wrapper costs.
Beside them, the native tool with its invoker's signature stated as objects, as the wrapper's is
(the SDK parses string annotations on every call). Stop →
settle: the click to the run's end (native: ``cancel("immediate")`` to the stream's end; wrapped:
``rt.abort()`` returning), for a read-only tool blocked forever and a process tool running
``sleep 60``. Native "settles" without ending the process; the table says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Agent, FunctionTool, Runner, function_tool, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from benchmarks import common
from benchmarks.common import fmt_s, median, table
from benchmarks.integrations import CALLS, ROUNDS, STOPS, _alive, _kill
from turnwatch.integrations.openai_agents import (
    RunStopped,
    StoppableRunner,
    run_command,
    tool_class,
    typed_invoker,
)
from turnwatch.runtime import LocalHost, Runtime


def _model(n: int, rounds: int) -> ScriptedModel:
    steps = []
    for _ in range(rounds):
        calls = [function_call("tool", {}, call_id=f"c{i}") for i in range(n)]
        steps += [ModelStep(output=calls), ModelStep(output=[assistant_message("done")])]
    return ScriptedModel(steps)


async def _drain(result: Any) -> None:
    async for _ev in result.stream_events():
        pass


async def per_call() -> dict[str, float]:
    """Seconds per call: native, native with its invoker's signature given, wrapped per class."""

    @function_tool(name_override="tool")
    async def noop() -> str:
        """Nothing."""
        return ""

    def agent(tool: FunctionTool) -> Agent[Any]:
        return Agent(name="a", model=_model(CALLS, ROUNDS + 2), tools=[tool])

    native, signed = agent(noop), agent(signed_invoker(noop))

    def wrapped(cls: str) -> Callable[[str], Awaitable[object]]:
        rt = Runtime(LocalHost(), max_running=CALLS)  # every call admitted at once, as natively
        runner = StoppableRunner(agent(noop), rt, classes={"tool": cls})
        return lambda session: runner.run("go", session=session)

    return await common.per_call(
        {
            "native": lambda _s: _drain(Runner.run_streamed(native, "go")),
            "native, its invoker's signature given as objects": lambda _s: _drain(
                Runner.run_streamed(signed, "go")
            ),
            "wrapped, read_only": wrapped("read_only"),
            "wrapped, mutating": wrapped("mutating"),
        },
        calls=CALLS,
        rounds=ROUNDS,
    )


def signed_invoker(tool: FunctionTool) -> FunctionTool:
    """``tool`` with the same invoker, its signature stated as objects, as the wrapper's is."""
    return dataclasses.replace(tool, on_invoke_tool=typed_invoker(tool.on_invoke_tool))


async def stops() -> list[list[object]]:
    rows: list[list[object]] = []
    pids: list[int] = []

    async def blocked() -> str:
        await asyncio.Event().wait()
        return ""

    def native_sleep() -> str:
        proc = subprocess.Popen(["sleep", "60"])
        pids.append(proc.pid)
        proc.wait()
        return ""

    async def wrapped_sleep() -> str:
        return (await run_command(["sleep", "60"])).output

    cases: list[tuple[str, Any, Any, str]] = [
        ("read-only (blocked)", blocked, blocked, "read_only"),
        ("process (`sleep 60`)", native_sleep, wrapped_sleep, "process"),
    ]
    for label, native_fn, wrapped_fn, cls in cases:
        native_tool: FunctionTool = function_tool(native_fn, name_override="tool")
        wrapped_tool = tool_class(function_tool(wrapped_fn, name_override="tool"), cls)
        native = Agent(name="n", model=_model(1, STOPS), tools=[native_tool])
        rt = Runtime(LocalHost(), grace_s=2.0)
        wrapped = StoppableRunner(Agent(name="w", model=_model(1, STOPS), tools=[wrapped_tool]), rt)
        n_s, w_s = [], []
        for i in range(STOPS):
            result = Runner.run_streamed(native, "go")
            task = asyncio.ensure_future(_drain(result))
            await asyncio.sleep(0.05)
            t0 = time.perf_counter()
            result.cancel("immediate")
            await task
            n_s.append(time.perf_counter() - t0)
            run = asyncio.ensure_future(wrapped.run("go", session=f"{cls}{i}"))
            await asyncio.sleep(0.05)
            t0 = time.perf_counter()
            await rt.abort(f"{cls}{i}")
            w_s.append(time.perf_counter() - t0)
            with contextlib.suppress(RunStopped):
                await run
        left, began = sum(1 for pid in pids if _alive(pid)), len(pids)
        for pid in pids:
            _kill(pid)
        pids.clear()
        # Some stops land before the SDK's thread started the command: counted of those begun.
        after = f"{left} of {began} started still running" if cls == "process" else "-"
        rows.append([label, fmt_s(median(n_s)), fmt_s(median(w_s)), after, "none"])
    return rows


async def main() -> str:
    set_tracing_disabled(True)
    rows = common.per_call_rows(await per_call())
    out = [
        "## OpenAI Agents SDK: native and wrapped\n",
        f"Per tool call ({CALLS} no-op calls per streamed run, median of {ROUNDS} runs of each, "
        "shuffled in each round; no sink):\n",
        table(["", "per call", "over native"], rows),
        "",
        "The SDK reads a tool invoker's signature on every call, and its own invoker's "
        "annotations are strings, which it parses: the wrapper's invoker states its signature "
        "as objects, and saves that (the second row). Against that row, the wrapper adds "
        "turnwatch's call alone.",
        "",
        f"Stop → settle (click to the run's end, median of {STOPS}):\n",
        table(
            [
                "tool",
                'native (cancel("immediate"))',
                "wrapped (rt.abort)",
                "native: left running",
                "wrapped: left running",
            ],
            await stops(),
        ),
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    print(asyncio.run(main()))
