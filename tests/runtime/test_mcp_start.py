"""An MCP server that does not start says why, and leaves no process behind.

A server given a wrong flag or a missing module exits at once, saying why on its stderr; one
that hangs never answers ``initialize``. The first was said as "unhandled errors in a TaskGroup
(1 sub-exception)" with its stderr discarded; the second hung ``add_mcp_server`` for good.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from turnwatch.runtime import LocalHost, MemorySink, Outcome, Runtime
from turnwatch.runtime.tools.mcp import McpServerConfig
from turnwatch.runtime.tools.mcp_stderr import TAIL_BYTES


def running(token: str) -> list[psutil.Process]:
    """This process's live descendants whose command line holds ``token``."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if token in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


async def test_a_server_that_exits_at_once_is_said_with_its_last_words() -> None:
    host = LocalHost()
    script = (
        "import sys; sys.stderr.write('usage: server [--port N]\\nunknown flag --x\\n'); "
        "sys.exit(3)"
    )
    with pytest.raises(RuntimeError) as got:
        await asyncio.wait_for(
            host.add_mcp_server(McpServerConfig("broken", sys.executable, ("-c", script))), 30
        )
    said = str(got.value)
    assert said.startswith(f"MCP server 'broken' ({sys.executable}) failed to start: ")
    assert "TaskGroup" not in said
    assert "closed its end before answering" in said
    assert said.endswith("its stderr ends: usage: server [--port N] unknown flag --x")
    await host.close()


async def test_a_server_that_never_answers_is_given_up_on_and_ended() -> None:
    host = LocalHost()
    token = uuid.uuid4().hex
    script = (
        f"import sys, time; sys.stderr.write('waiting {token}\\n'); sys.stderr.flush(); "
        "time.sleep(300)"
    )
    config = McpServerConfig("mute", sys.executable, ("-c", script, token), start_timeout_s=1.0)
    with pytest.raises(RuntimeError) as got:
        await asyncio.wait_for(host.add_mcp_server(config), 30)
    assert "no answer to initialize within 1 s" in str(got.value)
    assert str(got.value).endswith(f"its stderr ends: waiting {token}")
    assert running(token) == []
    await host.close()


async def test_a_server_that_writes_much_on_stderr_goes_on_serving(tmp_path: Path) -> None:
    """Its stderr is a pipe read as it comes (the last of it kept): a server writing more than
    a pipe holds never blocks on it."""
    log = tmp_path / "calls.log"
    script = (
        "import runpy, sys\n"
        f"sys.stderr.write('x' * {64 * TAIL_BYTES * 4}); sys.stderr.flush()\n"
        f"sys.argv = ['testing_mcp', '--log', {str(log)!r}]\n"
        "runpy.run_module('turnwatch.testing_mcp', run_name='__main__')\n"
    )
    host = LocalHost()
    tools = await asyncio.wait_for(
        host.add_mcp_server(McpServerConfig("noisy", sys.executable, ("-c", script))), 30
    )
    sink = MemorySink()
    runtime = Runtime(host, sink=sink)
    turn = runtime.start_turn("s")
    assert "mcp__noisy__deploy" in tools
    call = turn.request("mcp__noisy__deploy", {"seconds": 0})
    result = await asyncio.wait_for(call.result(), 30)
    assert result.outcome is Outcome.COMPLETED, result.error
    await turn.finish()
    await host.close()
