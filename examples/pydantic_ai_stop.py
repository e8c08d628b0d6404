"""A pydantic-ai agent stopped the ADR's way, offline: ``python examples/pydantic_ai_stop.py``.

The model is pydantic-ai's ``FunctionModel``, scripted to call two tools at once: ``sh`` (a
process tool running a command that ignores SIGTERM) and ``save`` (a mutating tool writing a file
in chunks). Half a second in, the user clicks Stop. The command is ended within the grace window,
the write is awaited to its end, and the run raises ``RunCancelled`` only after both. Everything
lands in a ledger: ``turnwatch explain`` it afterwards.

Needs ``pip install 'turnwatch[pydantic-ai]'``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from turnwatch.integrations.pydantic_ai import StoppableAgent, run_command
from turnwatch.runtime import LocalHost, Runtime
from turnwatch.tracing import Ledger


def main(ledger_path: Path, workdir: Path) -> None:
    target = workdir / "report.txt"
    begun = asyncio.Event()  # the write's first line is on disk

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:  # the first turn: both tools at once
            return ModelResponse(
                parts=[
                    ToolCallPart("sh", {"cmd": "trap '' TERM; sleep 60"}, tool_call_id="sh-1"),
                    ToolCallPart("save", {"path": str(target)}, tool_call_id="save-1"),
                ]
            )
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model))

    @agent.tool_plain(metadata={"turnwatch_class": "process"})
    async def sh(cmd: str) -> str:
        """Run a shell command (contained; a stop ends it within the grace window)."""
        return (await run_command(["bash", "-c", cmd])).output

    @agent.tool_plain  # no class: mutating, awaited
    async def save(path: str) -> str:
        """Write the report, a chunk at a time."""
        with open(path, "w") as f:  # noqa: ASYNC230 - a local file, written between awaits
            for i in range(10):
                f.write(f"line {i}\n")
                f.flush()
                begun.set()
                await asyncio.sleep(0.1)
        return "saved"

    async def run() -> None:
        ledger = Ledger(ledger_path)
        rt = Runtime(LocalHost(), sink=ledger, grace_s=1.0)
        wrapped = StoppableAgent(agent, rt)
        started = time.monotonic()
        task = asyncio.ensure_future(wrapped.run("write the report", session="example"))
        # The stop, once the write has begun: a stop before it would keep it from ever
        # starting, which is right, but not what this shows.
        await asyncio.wait(
            [asyncio.ensure_future(begun.wait()), task], return_when=asyncio.FIRST_COMPLETED
        )
        receipt = await rt.abort("example", source="ui")
        print(f"abort → {receipt} after {time.monotonic() - started:.2f} s")
        try:
            await task
        except RunCancelled:
            print("the run raised RunCancelled, after every call was released")
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
