"""pydantic-ai, native against wrapped (StoppableAgent), side by side in one run.

Per tool call: a run whose model asks for 50 no-op tool calls at once, native and wrapped per
class (no sink: an unobserved runtime records nothing), interleaved; the difference per call is
what the wrapper costs. Beside them, the native run with a capability that does nothing: what
pydantic-ai's dispatch costs any capability, the wrapper's included.

Stop → settle: the click to the run's end (native: the token's cancel to
``RunCancelled``; wrapped: ``rt.abort()`` returning), for a read-only tool blocked forever and
a process tool running ``sleep 60``. Native "settles" without ending the process; the table says
so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai import Agent, CancellationToken
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from benchmarks import common
from benchmarks.common import fmt_s, median, table
from turnwatch.integrations.pydantic_ai import StoppableAgent, run_command
from turnwatch.runtime import LocalHost, Runtime
from turnwatch.runtime.runtime import DEFAULT_MAX_RUNNING

CALLS = 50
ROUNDS = 40
STOPS = 10


def _model(tool: str, n: int, args: dict[str, Any] | None = None) -> FunctionModel:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[ToolCallPart(tool, args or {}, tool_call_id=f"c{i}") for i in range(n)]
            )
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(model)


@dataclasses.dataclass
class _Empty(AbstractCapability[Any]):
    """A capability that does nothing: what pydantic-ai costs any capability, per call."""


async def per_call() -> dict[str, float]:
    """Seconds per call: native, native with an empty capability, and wrapped per class."""
    agent = Agent(_model("noop", CALLS))

    @agent.tool_plain
    async def noop() -> str:
        return ""

    def wrapped(cls: str, max_running: int = CALLS) -> Callable[[str], Awaitable[object]]:
        # Every call of the run admitted at once, as natively (the default limit is a row).
        stoppable = StoppableAgent(
            agent, Runtime(LocalHost(), max_running=max_running), default_class=cls
        )
        return lambda session: stoppable.run("go", session=session)

    return await common.per_call(
        {
            "native": lambda _s: agent.run("go"),
            "native + an empty capability": lambda _s: agent.run("go", capabilities=[_Empty()]),
            "wrapped, read_only": wrapped("read_only"),
            "wrapped, mutating": wrapped("mutating"),
            "wrapped, read_only, admission limit 8 (the default)": wrapped(
                "read_only", DEFAULT_MAX_RUNNING
            ),
        },
        calls=CALLS,
        rounds=ROUNDS,
    )


async def _stop_native(agent: Agent[Any, str]) -> float:
    token = CancellationToken()
    task = asyncio.ensure_future(agent.run("go", cancellation_token=token))
    await asyncio.sleep(0.05)
    t0 = time.perf_counter()
    token.cancel()
    with contextlib.suppress(RunCancelled):
        await task
    return time.perf_counter() - t0


async def _stop_wrapped(wrapped: StoppableAgent[Any, str], rt: Runtime, session: str) -> float:
    task = asyncio.ensure_future(wrapped.run("go", session=session))
    await asyncio.sleep(0.05)
    t0 = time.perf_counter()
    await rt.abort(session)
    took = time.perf_counter() - t0
    with contextlib.suppress(RunCancelled):
        await task
    return took


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

    cases: list[tuple[str, Callable[..., Any], Callable[..., Awaitable[str]], str]] = [
        ("read-only (blocked)", blocked, blocked, "read_only"),
        ("process (`sleep 60`)", native_sleep, wrapped_sleep, "process"),
    ]
    for label, native_fn, wrapped_fn, cls in cases:
        native = Agent(_model("tool", 1))
        native.tool_plain(name="tool")(native_fn)
        wrapped_agent = Agent(_model("tool", 1))
        wrapped_agent.tool_plain(name="tool", metadata={"turnwatch_class": cls})(wrapped_fn)
        rt = Runtime(LocalHost(), grace_s=2.0)
        wrapped = StoppableAgent(wrapped_agent, rt)
        n_s, w_s = [], []
        for i in range(STOPS):
            n_s.append(await _stop_native(native))
            w_s.append(await _stop_wrapped(wrapped, rt, f"{cls}{i}"))
        left = sum(1 for pid in pids if _alive(pid))
        for pid in pids:
            _kill(pid)
        pids.clear()
        after = f"{left} of {STOPS} processes still running" if cls == "process" else "-"
        rows.append([label, fmt_s(median(n_s)), fmt_s(median(w_s)), after, "none"])
    return rows


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _kill(pid: int) -> None:
    subprocess.run(["kill", "-9", str(pid)], check=False, capture_output=True)


async def main() -> str:
    rows = common.per_call_rows(await per_call())
    out = [
        "## pydantic-ai: native and wrapped\n",
        f"Per tool call ({CALLS} no-op calls per run, median of {ROUNDS} runs of each, "
        "shuffled in each round; no sink):\n",
        table(["", "per call", "over native"], rows),
        "",
        "Any capability costs pydantic-ai's own dispatch per call (each hook copies the run "
        "context for each capability): the empty one's row. The wrapper's is one.",
        "",
        f"Stop → settle (click to the run's end, median of {STOPS}):\n",
        table(
            [
                "tool",
                "native (token.cancel)",
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
