"""A LangGraph graph stopped the ADR's way, offline: ``python examples/langgraph_stop.py``.

The model is langchain-core's fake chat model, scripted to call two tools at once: ``sh`` (a
process tool running a command that ignores SIGTERM) and ``save`` (a mutating tool writing a file
in chunks). Half a second in, the user clicks Stop. The command is ended within the grace window,
the write is awaited to its end, each call's answer is written to the thread's checkpoint, and
the run ends there, before the model is asked again. Everything lands in a ledger: ``turnwatch
explain`` it afterwards.

Needs ``pip install 'turnwatch[langgraph]'``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

from turnwatch.integrations.langgraph import StoppableGraph, tool_node
from turnwatch.integrations.wrappers import run_command
from turnwatch.runtime import LocalHost, Runtime
from turnwatch.tracing import Ledger


class Scripted(GenericFakeChatModel):
    """The fake chat model, able to drive a ToolNode."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def main(ledger_path: Path, workdir: Path) -> None:
    target = workdir / "report.txt"
    begun = asyncio.Event()  # the write's first line is on disk

    @tool
    async def sh(cmd: str) -> str:
        """Run a shell command (contained; a stop ends it within the grace window)."""
        return (await run_command(["bash", "-c", cmd])).output

    sh.metadata = {"turnwatch_class": "process"}

    @tool
    async def save(path: str) -> str:  # no class: mutating, awaited
        """Write the report, a chunk at a time."""
        with open(path, "w") as f:  # noqa: ASYNC230 - a local file, written between awaits
            for i in range(10):
                f.write(f"line {i}\n")
                f.flush()
                begun.set()
                await asyncio.sleep(0.1)
        return "saved"

    calls = [
        {"id": "sh-1", "name": "sh", "args": {"cmd": "trap '' TERM; sleep 60"}},
        {"id": "save-1", "name": "save", "args": {"path": str(target)}},
    ]
    model = Scripted(messages=iter([AIMessage(content="", tool_calls=calls), AIMessage("done")]))

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    async def run() -> None:
        ledger = Ledger(ledger_path)
        rt = Runtime(LocalHost(), sink=ledger, grace_s=1.0)
        g = StateGraph(MessagesState)
        g.add_node("agent", agent)
        g.add_node("tools", tool_node([sh, save], rt))
        g.add_edge(START, "agent")
        g.add_conditional_edges("agent", lambda s: "tools" if s["messages"][-1].tool_calls else END)
        g.add_edge("tools", "agent")
        app = StoppableGraph(g.compile(checkpointer=InMemorySaver()), rt)
        cfg = {"configurable": {"thread_id": "example"}}
        started = time.monotonic()
        task = asyncio.ensure_future(
            app.ainvoke({"messages": [("user", "write the report")]}, cfg, session="example")
        )
        # The stop, once the write has begun: a stop before it would keep it from ever
        # starting, which is right, but not what this shows.
        await asyncio.wait(
            [asyncio.ensure_future(begun.wait()), task], return_when=asyncio.FIRST_COMPLETED
        )
        receipt = await rt.abort("example", source="ui")
        print(f"abort → {receipt} after {time.monotonic() - started:.2f} s")
        final = await task
        for m in final["messages"]:
            if isinstance(m, ToolMessage):
                print(f"  {m.tool_call_id}: {m.status}: {str(m.content).splitlines()[0]}")
        lines = target.read_text().count("\n")
        print(f"{target.name}: {lines} of 10 lines (the write was awaited, not cut)")
        ledger.close()

    asyncio.run(run())
    print(f"ledger: {ledger_path}\n  turnwatch explain example --ledger {ledger_path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledger", type=Path, help="ledger file [default: a temporary one]")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="turnwatch-example-"))
    main(args.ledger or tmp / "ledger.sqlite3", tmp)
