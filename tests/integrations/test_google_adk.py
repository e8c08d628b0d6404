"""Google ADK, native and wrapped, side by side: an ``LlmAgent`` whose model is scripted (ADK's own
``MockModel``), its tools real (a TERM-ignoring process tree, a slow read, a write), run by ADK's
``InMemoryRunner``.

Native, ``abort_signal`` set mid-step leaves the tree running and seals the write, begun but cut
short, as aborted. Wrapped, ``rt.abort()`` returns once each call is released under its policy,
and every call has its real outcome in ADK's history: nothing is left for ADK to seal.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, ToolThreadPoolConfig
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import InMemoryRunner
from google.adk.tools.base_tool import BaseTool

from tests.conftest import until
from tests.integrations.adk_parts import (
    ABORTED,
    HI,
    STEP,
    TERM_IGNORING_TREE,
    Tools,
    answers,
    call,
    classed,
    consume,
    history,
    model,
    new_session,
    says,
    stopping,
    unanswered,
    wrapped,
)
from tests.integrations.procs import end_marked, marked_alive
from turnwatch import names
from turnwatch.integrations.google_adk import StoppableRunner, ToolClassError, TurnwatchPlugin
from turnwatch.integrations.wrappers import UnwrappedToolWarning, run_command_sync
from turnwatch.runtime import MemorySink, Receipt, Runtime
from turnwatch.testing import check_invariants


@pytest.fixture
def rt(runtime: Runtime) -> Runtime:
    return runtime


async def test_native_an_abort_leaves_the_tree_running_and_seals_the_write_cut_short() -> None:
    t = Tools(native=True)
    llm = model(STEP)
    runner = InMemoryRunner(agent=LlmAgent(name="a", model=llm, tools=list(t.all)), app_name="app")
    sid = await new_session(runner)
    abort = asyncio.Event()
    t.hold = abort.is_set  # under way at the abort: ADK's cancel then cuts it
    pool = RunConfig(tool_thread_pool_config=ToolThreadPoolConfig())
    run = asyncio.ensure_future(
        consume(
            runner.run_async(
                user_id="u", session_id=sid, new_message=HI, abort_signal=abort, run_config=pool
            )
        )
    )
    try:
        await until(lambda: len(marked_alive("native")) >= 3 and t.started, what="the tools")
        abort.set()
        await asyncio.wait_for(run, 10)
        assert len(marked_alive("native")) >= 3  # the tree runs on
        said = answers(await history(runner, sid))
        assert t.started == ["a"]
        assert t.written == []  # the write was cut short, half done
        assert {c: r.get("error", "") for c, r in said.items()} == {
            "r1": "Invocation was aborted by client.",
            "p1": "Invocation was aborted by client.",
            "w1": "Invocation was aborted by client.",
        }
    finally:
        end_marked("native", t.spawned)


async def test_wrapped_every_call_has_its_real_outcome_and_nothing_runs_on(
    rt: Runtime, sink: MemorySink
) -> None:
    t = Tools()
    llm = model(STEP, says(call("w2", "write", text="b")))
    runner, app = wrapped(rt, t.all, llm)
    sid = await new_session(runner)
    t.hold = stopping(rt, sid)  # the write ends only after the stop began: completed after it
    run = asyncio.ensure_future(consume(app.run_async(user_id="u", session_id=sid, new_message=HI)))
    await until(lambda: len(marked_alive(sid)) >= 3 and t.started, what="the tools")
    assert await rt.abort(sid) is Receipt.ACCEPTED
    assert marked_alive(sid) == []  # abort() returned: nothing of the process call outlived it
    assert t.written == ["a"]  # the write was awaited to its end
    await asyncio.wait_for(run, 10)
    assert llm.asked == 1  # the model was not asked again: its next write never began
    assert t.started == ["a"]
    events = await history(runner, sid)
    assert unanswered(events) == set()
    said = answers(events)
    assert said["w1"] == {"result": "written"}  # completed after the stop: its real result
    assert "discarded" in said["r1"]["error"]
    assert "ended" in said["p1"]["error"]
    # ADK had nothing to seal: no call is answered "aborted by client".
    assert not any(ABORTED in str(r) for r in said.values())
    ended = {
        str(e.call): e.attrs.get("outcome")
        for e in sink
        if e.kind == names.TOOL_FINISHED and e.call is not None
    }
    assert ended == {"w1": "completed_after_stop", "p1": "aborted"}
    assert check_invariants(list(sink)) == []


class Thinking(BaseLlm):
    """A model that never answers: the stop comes while it runs."""

    model: str = "thinking"
    started: Any = None

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.started.set()
        await asyncio.sleep(3600)
        yield LlmResponse()


async def test_a_stop_while_the_model_runs_ends_the_run_at_once(
    rt: Runtime, sink: MemorySink
) -> None:
    thinking = Thinking(started=asyncio.Event())
    runner, app = wrapped(rt, Tools().all, thinking)
    sid = await new_session(runner)
    run = asyncio.ensure_future(consume(app.run_async(user_id="u", session_id=sid, new_message=HI)))
    await asyncio.wait_for(thinking.started.wait(), 10)
    assert await rt.abort(sid) is Receipt.ACCEPTED
    await asyncio.wait_for(run, 5)
    events = await history(runner, sid)
    assert events[-1].error_code == ABORTED  # ADK's own record of the abort
    assert unanswered(events) == set()
    assert rt.session(sid).live is None  # settled
    assert check_invariants(list(sink)) == []


async def test_the_callers_own_abort_signal_is_the_same_stop(rt: Runtime, sink: MemorySink) -> None:
    t = Tools()
    runner, app = wrapped(rt, t.all, model(STEP))
    sid = await new_session(runner)
    abort = asyncio.Event()
    events = app.run_async(user_id="u", session_id=sid, new_message=HI, abort_signal=abort)
    run = asyncio.ensure_future(consume(events))
    await until(lambda: len(marked_alive(sid)) >= 3 and t.started, what="the tools")
    abort.set()
    await asyncio.wait_for(run, 10)
    assert marked_alive(sid) == []
    assert t.written == ["a"]
    assert unanswered(await history(runner, sid)) == set()
    sources = {e.attrs.get("source") for e in sink if e.kind == names.ABORT_RPC_RECEIVED}
    assert sources == {"framework"}
    assert check_invariants(list(sink)) == []


async def test_a_cancel_of_the_task_reading_the_run_is_a_stop(
    rt: Runtime, sink: MemorySink
) -> None:
    t = Tools()
    runner, app = wrapped(rt, t.all, model(STEP))
    sid = await new_session(runner)
    run = asyncio.ensure_future(consume(app.run_async(user_id="u", session_id=sid, new_message=HI)))
    await until(lambda: len(marked_alive(sid)) >= 3 and t.started, what="the tools")
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert marked_alive(sid) == []  # the cancel waited for the stop (bounded by the grace)
    sources = {e.attrs.get("source") for e in sink if e.kind == names.ABORT_RPC_RECEIVED}
    assert sources == {"cancel"}
    await until(lambda: rt.session(sid).live is None, what="the turn to settle")
    assert check_invariants(list(sink)) == []


async def test_a_sync_tool_runs_off_the_loop_and_the_stop_awaits_it(
    rt: Runtime, sink: MemorySink
) -> None:
    done: list[str] = []
    entered = threading.Event()

    def save(text: str) -> str:
        """a blocking write, still under way a while after the stop reached it"""
        entered.set()
        while not stopped():
            time.sleep(0.005)
        time.sleep(0.3)
        done.append(text)
        return "saved"

    ticks = 0

    async def beat() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    runner, app = wrapped(
        rt, [classed(save, "mutating")], model(says(call("s1", "save", text="a")))
    )
    sid = await new_session(runner)
    stopped = stopping(rt, sid)
    heart = asyncio.ensure_future(beat())
    run = asyncio.ensure_future(consume(app.run_async(user_id="u", session_id=sid, new_message=HI)))
    await until(entered.is_set, what="the sync tool to start")
    before = ticks
    assert await rt.abort(sid) is Receipt.ACCEPTED
    assert done == ["a"]  # awaited to its end
    assert ticks - before >= 5  # the loop ran while the tool blocked its thread
    await asyncio.wait_for(run, 10)
    heart.cancel()
    assert answers(await history(runner, sid))["s1"] == {"result": "saved"}
    assert check_invariants(list(sink)) == []


async def test_outside_a_stoppable_runner_adk_runs_the_tools_itself(
    rt: Runtime, sink: MemorySink
) -> None:
    t = Tools(write_s=0)
    runner, _app = wrapped(rt, t.all, model(says(call("w1", "write", text="a"))))
    sid = await new_session(runner)
    await consume(runner.run_async(user_id="u", session_id=sid, new_message=HI))
    assert t.written == ["a"]
    assert [e for e in sink if e.call is not None] == []  # no turnwatch call


def test_classes_are_checked_when_the_plugin_is_built(rt: Runtime) -> None:
    class Custom(BaseTool):
        """A tool of its own kind: no function whose commands run_command could start."""

    custom = Custom(name="custom", description="")
    custom.custom_metadata = {"turnwatch_class": "process"}
    with pytest.raises(ToolClassError, match=r"'look'.*'readonly'"):
        TurnwatchPlugin(rt, [classed(Tools().all[0].func, "readonly")])
    with pytest.raises(ToolClassError, match=r"'custom'.*run_command"):
        TurnwatchPlugin(rt, [custom])
    with pytest.raises(ToolClassError, match="'write'"):
        TurnwatchPlugin(rt, classes={"write": "sometimes"})
    with pytest.raises(TypeError, match="TurnwatchPlugin"):
        StoppableRunner(InMemoryRunner(agent=LlmAgent(name="a", model=model()), app_name="x"), rt)


async def test_a_tool_the_model_named_that_does_not_exist_is_adks_to_answer(
    rt: Runtime, sink: MemorySink
) -> None:
    t = Tools(write_s=0)
    llm = model(says(call("x1", "nosuch"), call("w1", "write", text="a")))
    runner, app = wrapped(rt, t.all, llm)
    sid = await new_session(runner)
    await consume(app.run_async(user_id="u", session_id=sid, new_message=HI))
    said = answers(await history(runner, sid))
    assert "no tool with that name" in said["x1"]["error"]
    assert said["w1"] == {"result": "written"}
    assert {e.call for e in sink if e.kind == names.TOOL_REQUESTED} == {"w1"}
    assert check_invariants(list(sink)) == []


async def test_a_sync_process_tool_runs_its_command_contained_and_the_stop_ends_it(
    rt: Runtime, sink: MemorySink
) -> None:
    """A sync tool, as ADK users write them (the recipe's shell tool): in a thread, its command
    started with run_command_sync. The stop ends the command within the grace window, and the
    thread's wait with it."""

    def sh() -> str:
        """a shell command that ignores SIGTERM, from a sync tool"""
        return run_command_sync(["bash", "-c", TERM_IGNORING_TREE]).output

    runner, app = wrapped(rt, [classed(sh, "process")], model(says(call("p1", "sh"))))
    sid = await new_session(runner)
    run = asyncio.ensure_future(consume(app.run_async(user_id="u", session_id=sid, new_message=HI)))
    await until(lambda: len(marked_alive(sid)) >= 3, what="the tree to start")
    assert await rt.abort(sid) is Receipt.ACCEPTED
    assert marked_alive(sid) == []
    await asyncio.wait_for(run, 10)
    assert "ended" in answers(await history(runner, sid))["p1"]["error"]
    ended = {str(e.call): e.attrs.get("outcome") for e in sink if e.kind == names.TOOL_FINISHED}
    assert ended == {"p1": "aborted"}
    assert check_invariants(list(sink)) == []


async def test_run_command_sync_refuses_to_block_the_loop(rt: Runtime) -> None:
    async def sh() -> str:
        """a shell command, wrongly from the loop"""
        return run_command_sync(["true"]).output

    runner, app = wrapped(rt, [classed(sh, "process")], model(says(call("p1", "sh"))))
    sid = await new_session(runner)
    with pytest.raises(RuntimeError, match="await run_command"):
        await consume(app.run_async(user_id="u", session_id=sid, new_message=HI))


class Handles(BasePlugin):
    """An application's plugin answering a tool's error itself (as ADK's retry plugins do)."""

    def __init__(self) -> None:
        super().__init__(name="handles")
        self.seen: list[str] = []

    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: Any, error: Exception
    ) -> dict[str, Any]:
        self.seen.append(f"{tool.name}: {error}")
        return {"error": f"handled: {error}"}


async def test_a_wrapped_tools_error_reaches_adks_error_callbacks(
    rt: Runtime, sink: MemorySink
) -> None:
    async def fails() -> str:
        """a tool that fails"""
        raise ValueError("disk on fire")

    tools = [classed(fails, "mutating")]
    agent = LlmAgent(name="a", model=model(says(call("f1", "fails"))), tools=list(tools))
    handles = Handles()
    plugins = [TurnwatchPlugin(rt, tools), handles]
    runner = InMemoryRunner(app=App(name="app", root_agent=agent, plugins=plugins))
    app = StoppableRunner(runner, rt)
    sid = await new_session(runner)
    await consume(app.run_async(user_id="u", session_id=sid, new_message=HI))
    assert handles.seen == ["fails: disk on fire"]
    assert answers(await history(runner, sid))["f1"] == {"error": "handled: disk on fire"}
    ended = {str(e.call): e.attrs.get("outcome") for e in sink if e.kind == names.TOOL_FINISHED}
    assert ended == {"f1": "failed"}
    assert check_invariants(list(sink)) == []


def test_an_agent_whose_code_runs_here_is_named_when_the_runner_is_made(rt: Runtime) -> None:
    """ADK runs a local code executor's code outside any tool call: no stop reaches it. Said,
    for the sub-agent that has one, not for the agents that do not."""
    from google.adk.code_executors import UnsafeLocalCodeExecutor

    coder = LlmAgent(name="coder", model=model(), code_executor=UnsafeLocalCodeExecutor())
    root = LlmAgent(name="a", model=model(), sub_agents=[coder])
    runner = InMemoryRunner(app=App(name="app", root_agent=root, plugins=[TurnwatchPlugin(rt)]))
    with pytest.warns(UnwrappedToolWarning, match="'coder' \\(UnsafeLocalCodeExecutor\\)") as seen:
        StoppableRunner(runner, rt)
    assert "'a'" not in str(seen[0].message)
