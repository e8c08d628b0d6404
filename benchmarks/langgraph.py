"""LangGraph, native against wrapped (``StoppableGraph`` + ``tool_node``), side by side in one run.

Per tool call: a graph whose model asks for 50 no-op tool calls at once, run natively
(``ToolNode``) and wrapped per class (no sink: an unobserved runtime records nothing),
interleaved; the difference per call is what the wrapper costs, beside LangGraph's own per-call
cost (target: turnwatch's share ≤ 10 %). The same for LangChain's ``create_agent``: native,
with a middleware whose ``awrap_tool_call`` does nothing, and with ``TurnwatchMiddleware``.

A stop: the model asks for a shell command (``sleep``) and a write at once; native, the run's
task is cancelled (how LangGraph stops); wrapped, ``rt.abort()``. For each: the stop → settle
time, the processes left running, the tool calls the checkpoint leaves unanswered, and whether
a resume (``ainvoke(None, cfg)``) runs the write again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import subprocess
import time
from collections import Counter
from typing import Any

import psutil
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode
from tests.integrations.lg_graphs import Scripted, agent_graph

from benchmarks import common
from benchmarks.common import fmt_s, median, table
from turnwatch.integrations.langgraph import StoppableGraph, tool_node
from turnwatch.integrations.wrappers import run_command
from turnwatch.runtime import LocalHost, Runtime

CALLS = 50
#: Runs of each variant, shuffled in each round: at 30, create_agent's rows (whose runs make
#: far more garbage per call than ToolNode's) moved by ±5 points between runs of the benchmark.
ROUNDS = 60
STOPS = 5


def _graph(node: Any, calls: list[dict[str, Any]], checkpointer: Any = None) -> Any:
    """The model asks for ``calls`` at once, then says done (a cycle: every run of the graph
    takes one of each)."""
    ask = AIMessage(content="", tool_calls=calls)
    return agent_graph(
        node, Scripted(messages=itertools.cycle([ask, AIMessage("done")])), checkpointer
    )


def _classed(t: BaseTool, cls: str) -> BaseTool:
    t.metadata = {**(t.metadata or {}), "turnwatch_class": cls}
    return t


async def per_call() -> dict[str, float]:
    """Seconds per call: native, and wrapped per class."""

    @tool
    async def noop() -> str:
        """does nothing"""
        return ""

    calls = [{"id": f"c{i}", "name": "noop", "args": {}} for i in range(CALLS)]
    go = {"messages": [("user", "go")]}
    native = _graph(ToolNode([noop]), calls)

    async def passthrough(request: Any, execute: Any) -> Any:  # a hook that does nothing
        return await execute(request)

    hooked = _graph(ToolNode([noop], awrap_tool_call=passthrough), calls)

    def wrapped(cls: str) -> Any:
        rt = Runtime(LocalHost(), max_running=CALLS)  # every call admitted at once, as natively
        app = StoppableGraph(_graph(tool_node([noop], rt, default_class=cls), calls), rt)
        return lambda session: app.ainvoke(go, session=session)

    return await common.per_call(
        {
            "native": lambda _s: native.ainvoke(go),
            "native + an empty awrap_tool_call hook": lambda _s: hooked.ainvoke(go),
            "wrapped, read_only": wrapped("read_only"),
            "wrapped, mutating": wrapped("mutating"),
        },
        calls=CALLS,
        rounds=ROUNDS,
    )


async def agent_per_call() -> dict[str, float]:
    """Seconds per call of ``create_agent``: native, an empty middleware, and wrapped."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentMiddleware

    from turnwatch.integrations.langgraph_middleware import TurnwatchMiddleware

    @tool
    async def noop() -> str:
        """does nothing"""
        return ""

    calls = [{"id": f"c{i}", "name": "noop", "args": {}} for i in range(CALLS)]
    go = {"messages": [("user", "go")]}

    def agent(middleware: list[Any]) -> Any:
        ask = AIMessage(content="", tool_calls=calls)
        model = Scripted(messages=itertools.cycle([ask, AIMessage("done")]))
        return create_agent(model=model, tools=[noop], middleware=middleware)

    class Passthrough(AgentMiddleware):
        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            return await handler(request)

    native, hooked = agent([]), agent([Passthrough()])

    def wrapped(cls: str) -> Any:
        rt = Runtime(LocalHost(), max_running=CALLS)
        mw = TurnwatchMiddleware(rt, [noop], default_class=cls)
        app = StoppableGraph(agent([mw]), rt)
        return lambda session: app.ainvoke(go, session=session)

    return await common.per_call(
        {
            "native": lambda _s: native.ainvoke(go),
            "native + an empty middleware": lambda _s: hooked.ainvoke(go),
            "wrapped, read_only": wrapped("read_only"),
            "wrapped, mutating": wrapped("mutating"),
        },
        calls=CALLS,
        rounds=ROUNDS,
    )


def _unanswered(messages: list[Any]) -> int:
    asked = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    return len(asked - answered)


class _Stop:
    """One side's stop, ``STOPS`` times: the settle times, and what each stop left."""

    def __init__(self, wrapped: bool) -> None:
        self.wrapped = wrapped
        self.seconds = "61" if wrapped else "62"  # each side's processes told apart
        self.runs: Counter[str] = Counter()
        self.settle: list[float] = []
        self.left = self.unanswered = self.reran = 0

    def tools(self) -> list[BaseTool]:
        runs, seconds = self.runs, self.seconds

        @tool
        async def write(text: str) -> str:
            """a write that takes a moment"""
            runs["write"] += 1
            await asyncio.sleep(0.2)
            return "written"

        if self.wrapped:

            @tool
            async def sh() -> str:
                """a shell command"""
                return (await run_command(["sleep", seconds])).output

            return [_classed(sh, "process"), write]

        @tool("sh")
        def native_sh() -> str:
            """a shell command, as a LangGraph tool runs one (a thread of the pool)"""
            runs["sh"] += 1
            if runs["sh"] > 1:  # a resume's re-run: counted, not waited for
                return "ran again"
            subprocess.run(["sleep", seconds], check=False)
            return "done"

        return [native_sh, write]

    async def once(self, i: int) -> None:
        calls = [
            {"id": "p1", "name": "sh", "args": {}},
            {"id": "w1", "name": "write", "args": {"text": "a"}},
        ]
        self.runs.clear()
        rt = Runtime(LocalHost(), grace_s=1.0)
        tools = self.tools()
        node = tool_node(tools, rt) if self.wrapped else ToolNode(tools)
        graph = _graph(node, calls, InMemorySaver())
        cfg = {"configurable": {"thread_id": f"t{i}"}}
        go = {"messages": [("user", "go")]}
        app = StoppableGraph(graph, rt) if self.wrapped else None
        run = asyncio.ensure_future(
            app.ainvoke(go, cfg, session=f"s{i}") if app is not None else graph.ainvoke(go, cfg)
        )
        await common.until(lambda: common.sleeping(self.seconds) and self.runs["write"])
        t0 = time.perf_counter()
        if app is not None:
            await rt.abort(f"s{i}")
            self.settle.append(time.perf_counter() - t0)
            await run
        else:
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run
            self.settle.append(time.perf_counter() - t0)
        self.left += len(common.sleeping(self.seconds))
        state = await graph.aget_state(cfg)
        self.unanswered += _unanswered(state.values.get("messages", []))
        before = self.runs["write"]
        if app is not None:
            await app.ainvoke(None, cfg, session=f"s{i}")
        else:
            await graph.ainvoke(None, cfg)
        self.reran += self.runs["write"] - before
        for p in common.sleeping(self.seconds):
            with contextlib.suppress(psutil.Error):
                p.kill()


async def stops() -> list[list[object]]:
    sides = {"native (task cancelled)": _Stop(False), "wrapped (rt.abort)": _Stop(True)}
    for i in range(STOPS):
        for side in sides.values():
            await side.once(i)
    return [
        [
            name,
            fmt_s(median(s.settle)),
            f"{s.left} of {STOPS}",
            f"{s.unanswered} in {STOPS} checkpoints",
            f"{s.reran} of {STOPS}",
        ]
        for name, s in sides.items()
    ]


async def main() -> str:
    rows = common.shares(
        await per_call(), "native + an empty awrap_tool_call hook", " (target ≤ 10 %)"
    )
    agent_rows = common.shares(
        await agent_per_call(), "native + an empty middleware", " (target ≤ 10 %)"
    )
    head = ["", "per call", "over native", "turnwatch's share (over the hook)"]
    return "\n".join(
        [
            "## LangGraph: native and wrapped\n",
            f"Per tool call ({CALLS} no-op calls per run, median of {ROUNDS} runs of each, "
            "shuffled in each round; no sink):\n",
            table(head, rows),
            "",
            "Any `awrap_tool_call` hook costs LangGraph's own dispatch per call: the empty one's "
            "row. The wrapper is one; its share is what it adds over that, of the native cost.",
            "",
            "`create_agent` (each call sent to its tools node on its own), native, with a "
            "middleware whose `awrap_tool_call` does nothing, and with `TurnwatchMiddleware`:\n",
            table(head, agent_rows),
            "",
            f"A stop with a process (`sleep`) and a write in flight (median of {STOPS}):\n",
            table(
                [
                    "",
                    "stop → settle",
                    "processes left running",
                    "tool calls unanswered",
                    "a resume runs the write again",
                ],
                await stops(),
            ),
            "",
        ]
    )


if __name__ == "__main__":
    print(asyncio.run(main()))
