"""A LangGraph application, run in its own process by the dangling-thread tests: a model node
and a ``ToolNode`` (a slow read, a slow write that notes each start in ``$LG_APP_DIR``), its
checkpoints in a SQLite file. The watchdog imports its ``graph`` to repair a thread.

python -m tests.watchdog.lg_app native|wrapped|resume CHECKPOINTS [LEDGER]
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from tests.integrations.lg_graphs import Scripted

CALLS = [{"id": "r1", "name": "look", "args": {}}, {"id": "w1", "name": "write", "args": {}}]
THREAD = {"configurable": {"thread_id": "t"}}


def _dir() -> Path:
    return Path(os.environ.get("LG_APP_DIR", "."))


@tool
async def look() -> str:
    """a slow read"""
    await asyncio.sleep(60)
    return "found"


@tool
async def write() -> str:
    """a slow write"""
    with (_dir() / "writes.log").open("a") as f:
        f.write("w\n")
    await asyncio.sleep(60)
    return "written"


look.metadata = {"turnwatch_class": "read_only"}
write.metadata = {"turnwatch_class": "mutating"}
TOOLS = [look, write]


def build(node: Any, replies: list[AIMessage]) -> StateGraph[Any]:
    """agent → tools → agent; each history the model is given, noted in ``model.log``."""
    model = Scripted(messages=iter(replies))

    async def agent(state: MessagesState) -> dict[str, Any]:
        with (_dir() / "model.log").open("a") as f:
            f.write(" ".join(type(m).__name__ for m in state["messages"]) + "\n")
        return {"messages": [await model.ainvoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", node)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", lambda s: "tools" if s["messages"][-1].tool_calls else END)
    g.add_edge("tools", "agent")
    return g


#: What the watchdog writes through (``--langgraph-graph tests.watchdog.lg_app:graph``).
graph = build(ToolNode(TOOLS), []).compile()


async def _started() -> None:
    while not (_dir() / "writes.log").exists():
        await asyncio.sleep(0.02)


async def main(what: str, checkpoints: str, ledger: str = "") -> None:
    asked = [AIMessage(content="", tool_calls=CALLS), AIMessage(content="done")]
    app: Any
    async with AsyncSqliteSaver.from_conn_string(checkpoints) as saver:
        if what == "native":  # the run cancelled in its tools step, as an app's stop does it
            app = build(ToolNode(TOOLS), asked).compile(checkpointer=saver)
            run = asyncio.ensure_future(app.ainvoke({"messages": [("user", "go")]}, THREAD))
            await _started()
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
        elif what == "resume":
            again = build(ToolNode(TOOLS), [AIMessage(content="done")])
            app = again.compile(checkpointer=saver)
            final = await app.ainvoke(None, THREAD)
            print(type(final["messages"][-1]).__name__, final["messages"][-1].content)
        else:  # wrapped, its process killed by the test in the tools step
            from turnwatch.integrations.langgraph import StoppableGraph, tool_node
            from turnwatch.runtime import LocalHost, Runtime
            from turnwatch.tracing.ledger import Ledger

            sink = Ledger(ledger)
            rt = Runtime(LocalHost(), sink=sink)
            app = build(tool_node(TOOLS, rt), asked).compile(checkpointer=saver)
            wrapped = StoppableGraph(app, rt)
            go = {"messages": [("user", "go")]}
            run = asyncio.ensure_future(wrapped.ainvoke(go, THREAD, session="t"))
            await _started()
            sink.flush()
            print("ready", flush=True)
            await run


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
