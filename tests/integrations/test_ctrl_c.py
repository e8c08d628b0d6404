"""Ctrl-C: a program whose wrapped run has a TERM-ignoring tree in flight gets SIGINT, as a user's
terminal sends it. ``asyncio.run`` cancels its main task; the wrapper takes that for a stop
(source ``cancel``): the tree ends within the grace window, the turn is recorded ``aborted``, and
the program exits. A real interpreter, a real signal, a real ledger file."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import GRACE
from tests.integrations.pai_parts import TERM_IGNORING_TREE, marked_alive
from turnwatch import names
from turnwatch.integrations.wrappers import CANCEL_SLACK_S
from turnwatch.tracing.ledger import read_events

PROGRAMS = {
    "pydantic_ai": """
        from pydantic_ai import Agent
        from pydantic_ai.messages import ToolCallPart
        from pydantic_ai.models.function import FunctionModel
        from tests.integrations.pai_parts import calls
        from turnwatch.integrations import pydantic_ai as w

        agent = Agent(FunctionModel(calls(ToolCallPart("sh", {}, tool_call_id="p1"))))
        agent.tool_plain(metadata={"turnwatch_class": "process"})(sh)
        runner = w.StoppableAgent(agent, rt)
    """,
    "openai_agents": """
        from agents import Agent, function_tool, set_tracing_disabled
        from tests.integrations.test_openai_agents import scripted
        from turnwatch.integrations import openai_agents as w

        set_tracing_disabled(True)
        tool = w.tool_class(function_tool(sh, name_override="sh"), "process")
        agent = Agent(name="a", model=scripted(("sh", {}, "p1")), tools=[tool])
        runner = w.StoppableRunner(agent, rt)
    """,
}

PROLOGUE = """
    import asyncio, sys
    from turnwatch.runtime import LocalHost, Runtime
    from turnwatch.tracing.ledger import Ledger

    ledger = Ledger(sys.argv[1])
    rt = Runtime(LocalHost(), grace_s={grace}, sink=ledger)

    async def sh() -> str:
        return str((await w.run_command(["bash", "-c", {tree!r}])).output)
"""

EPILOGUE = """
    try:
        asyncio.run(runner.run("go", session="s"))
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    finally:
        ledger.close()
"""


@pytest.mark.timeout(240)  # its waits, each bounded, add up past the suite's 120 s
@pytest.mark.parametrize("framework", ["pydantic_ai", "openai_agents"])
def test_ctrl_c_is_a_stop_the_tree_ends_and_the_turn_is_aborted(
    tmp_path: Path, framework: str
) -> None:
    # `sh` is defined before the framework's part uses it, `w` before `sh` runs.
    prologue = textwrap.dedent(PROLOGUE).format(grace=GRACE, tree=TERM_IGNORING_TREE)
    body = textwrap.dedent(PROGRAMS[framework])
    program = prologue + body + textwrap.dedent(EPILOGUE)
    path = tmp_path / "ledger.sqlite3"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), *sys.path])}
    child = subprocess.Popen(
        [sys.executable, "-c", program, str(path)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        # The program imports its framework first: past 30 s once, with two test runs of two
        # workers each on two cores.
        deadline = time.monotonic() + 90
        while len(marked_alive()) < 3:
            assert child.poll() is None, "the program ended before its tree started"
            assert time.monotonic() < deadline, "the tree never started"
            time.sleep(0.05)
        started = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=GRACE + CANCEL_SLACK_S + 20)
    finally:
        if child.poll() is None:
            child.kill()
    assert time.monotonic() - started < GRACE + CANCEL_SLACK_S + 10
    assert "interrupted" in out  # the interrupt still reached the program, after the stop
    assert marked_alive() == []
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    events = [e for _seq, e in read_events(conn)]
    sources = [e.attrs.get(names.K_SOURCE) for e in events if e.kind == names.ABORT_RPC_RECEIVED]
    assert sources == ["cancel"]
    settled = [e.attrs.get(names.K_OUTCOME) for e in events if e.kind == names.TURN_SETTLED]
    assert settled == ["aborted"]
