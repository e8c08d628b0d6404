"""A Google ADK agent stopped the ADR's way, offline: ``python examples/google_adk_stop.py``.

The model is scripted (a ``BaseLlm`` answering from a list) to call two tools at once: ``sh`` (a
process tool running a command that ignores SIGTERM) and ``save`` (a mutating tool writing a file
in chunks). Half a second in, the user clicks Stop. The command is ended within the grace window,
the write is awaited to its end, each call's answer is in ADK's session history with its real
outcome, and only then is ADK's own ``abort_signal`` set: the model is not asked again, and ADK
has no call to seal as aborted. Everything lands in a ledger: ``turnwatch explain`` it
afterwards.

Needs ``pip install 'turnwatch[google-adk]'``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
import time
from collections.abc import AsyncGenerator
from pathlib import Path

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools.function_tool import FunctionTool
from google.genai import types

from turnwatch.integrations.google_adk import StoppableRunner, TurnwatchPlugin
from turnwatch.integrations.wrappers import run_command
from turnwatch.runtime import LocalHost, Runtime
from turnwatch.tracing import Ledger


class Scripted(BaseLlm):
    """A model that answers from a list, one answer per call."""

    model: str = "scripted"
    answers: list[types.Content]

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        yield LlmResponse(content=self.answers.pop(0))


def main(ledger_path: Path, workdir: Path) -> None:
    target = workdir / "report.txt"
    begun = asyncio.Event()  # the write's first line is on disk

    async def sh(cmd: str) -> str:
        """Run a shell command (contained; a stop ends it within the grace window)."""
        return (await run_command(["bash", "-c", cmd])).output

    async def save(path: str) -> str:  # no class: mutating, awaited
        """Write the report, a chunk at a time."""
        with open(path, "w") as f:  # noqa: ASYNC230 - a local file, written between awaits
            for i in range(10):
                f.write(f"line {i}\n")
                f.flush()
                begun.set()
                await asyncio.sleep(0.1)
        return "saved"

    shell = FunctionTool(sh)
    shell.custom_metadata = {"turnwatch_class": "process"}
    tools = [shell, FunctionTool(save)]
    asks = [
        types.Part(
            function_call=types.FunctionCall(
                id="sh-1", name="sh", args={"cmd": "trap '' TERM; sleep 60"}
            )
        ),
        types.Part(
            function_call=types.FunctionCall(id="save-1", name="save", args={"path": str(target)})
        ),
    ]
    model = Scripted(
        answers=[
            types.Content(role="model", parts=asks),
            types.Content(role="model", parts=[types.Part(text="done")]),
        ]
    )

    async def run() -> None:
        ledger = Ledger(ledger_path)
        rt = Runtime(LocalHost(), sink=ledger, grace_s=1.0)
        agent = LlmAgent(name="writer", model=model, tools=list(tools))
        runner = InMemoryRunner(
            app=App(name="example", root_agent=agent, plugins=[TurnwatchPlugin(rt, tools)])
        )
        session = await runner.session_service.create_session(app_name="example", user_id="me")
        app = StoppableRunner(runner, rt)
        hi = types.Content(role="user", parts=[types.Part(text="write the report")])

        async def consume() -> None:
            async for _event in app.run_async(
                user_id="me", session_id=session.id, session="example", new_message=hi
            ):
                pass

        started = time.monotonic()
        task = asyncio.ensure_future(consume())
        # The stop, once the write has begun: a stop before it would keep it from ever
        # starting, which is right, but not what this shows.
        await asyncio.wait(
            [asyncio.ensure_future(begun.wait()), task], return_when=asyncio.FIRST_COMPLETED
        )
        receipt = await rt.abort("example", source="ui")
        print(f"abort → {receipt} after {time.monotonic() - started:.2f} s")
        await task
        done = await runner.session_service.get_session(
            app_name="example", user_id="me", session_id=session.id
        )
        assert done is not None
        for event in done.events:
            for r in event.get_function_responses():
                said = str(
                    r.response.get("error") or r.response.get("result") if r.response else ""
                )
                print(f"  {r.id}: {said.splitlines()[0]}")
        lines = target.read_text().count("\n")
        print(f"{target.name}: {lines} of 10 lines (the write was awaited, not cut)")
        ledger.close()

    asyncio.run(run())
    print(f"ledger: {ledger_path}\n  turnwatch explain example --ledger {ledger_path}")


if __name__ == "__main__":
    logging.getLogger("google_adk").setLevel(logging.ERROR)  # the scripted model's token usage
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledger", type=Path, help="ledger file [default: a temporary one]")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="turnwatch-example-"))
    main(args.ledger or tmp / "ledger.sqlite3", tmp)
