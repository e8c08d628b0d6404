"""The wrappers under the stops a framework's users actually make: a process tool stopped while it
prepares, a user's own token and capabilities, a run cancelled from outside, nested runs, SDK
handoffs. Both frameworks, real processes; native beside wrapped where the framework has a native
behaviour."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest
from agents import Agent as SdkAgent
from agents import function_tool, handoff
from agents.result import RunResultStreaming
from pydantic_ai import Agent, CancellationToken
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from tests.conftest import GRACE, turnwatch, until
from tests.integrations.pai_parts import (
    CHUNK,
    CHUNKS,
    TERM_IGNORING_TREE,
    begun,
    calls,
    marked_alive,
    write_in_chunks,
)
from tests.integrations.test_openai_agents import scripted
from tests.integrations.verdicts import no_violations, outcomes
from turnwatch import names
from turnwatch.integrations import openai_agents, pydantic_ai
from turnwatch.integrations.wrappers import CANCEL_SLACK_S
from turnwatch.runtime import FanOut, LocalHost, MemorySink, Receipt, Runtime
from turnwatch.runtime.events import now_event
from turnwatch.testing import check_invariants
from turnwatch.tracing.ledger import Ledger

# --- a process tool stopped before its command: the command never starts ---


def preparing_then(marker: Path, ready: asyncio.Event, run: Any) -> Any:
    """A process tool that prepares until ``ready``, then runs ``touch marker`` with ``run``."""

    async def deploy() -> str:
        """Deploy."""
        await ready.wait()
        done = await run(["touch", str(marker)])
        return str(done.output)

    return deploy


async def stop_while_preparing(rt: Runtime, sink: MemorySink, ready: asyncio.Event) -> None:
    """Stop the session while its tool prepares; let the preparation end right after the tool's
    ``tools.abort`` went out (inside its grace window), then wait for the stop."""
    await sink.wait_for(names.TOOL_REQUESTED)
    stop = asyncio.ensure_future(rt.abort("s"))
    await sink.wait_for(names.TOOLS_ABORT_SENT)
    ready.set()
    assert await stop is Receipt.ACCEPTED


async def test_pydantic_ai_a_process_tool_stopped_before_its_command_never_spawns_it(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    marker, ready = tmp_path / "ran", asyncio.Event()
    agent = Agent(FunctionModel(calls(ToolCallPart("deploy", {}, tool_call_id="d1"))))
    agent.tool_plain(metadata={"turnwatch_class": "process"})(
        preparing_then(marker, ready, pydantic_ai.run_command)
    )
    run = asyncio.ensure_future(pydantic_ai.StoppableAgent(agent, runtime).run("go", session="s"))
    await stop_while_preparing(runtime, sink, ready)
    with pytest.raises(BaseException):  # noqa: B017, PT011 - RunCancelled, the run's own end
        await run
    assert not marker.exists()
    assert outcomes(sink) == {"d1": "aborted"}
    assert marked_alive() == []
    no_violations(sink)


async def test_sdk_a_process_tool_stopped_before_its_command_never_spawns_it(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    marker, ready = tmp_path / "ran", asyncio.Event()
    tool = function_tool(
        preparing_then(marker, ready, openai_agents.run_command), name_override="deploy"
    )
    agent = SdkAgent(
        name="a",
        model=scripted(("deploy", {}, "d1")),
        tools=[openai_agents.tool_class(tool, "process")],
    )
    runner = openai_agents.StoppableRunner(agent, runtime)
    run = asyncio.ensure_future(runner.run("go", session="s"))
    await stop_while_preparing(runtime, sink, ready)
    with pytest.raises(openai_agents.RunStopped):
        await run
    assert not marker.exists()
    assert outcomes(sink) == {"d1": "aborted"}
    no_violations(sink)


def test_the_checker_flags_a_start_after_the_calls_tools_abort() -> None:
    """Any ``tool.started`` (one with a pid above all) after its call's ``tools.abort.sent``
    is a call that started after it was stopped: invariant 2."""

    def ev(kind: str, **attrs: Any) -> Any:
        return now_event(kind, "s", turn="t", call="c", tool="deploy", attrs=attrs)

    events = [
        now_event(names.TURN_STARTED, "s", turn="t"),
        ev(names.TOOL_REQUESTED, **{names.K_CLASS: "process"}),
        ev(names.TOOL_STARTED, **{names.K_CLASS: "process"}),
        ev(names.TOOLS_ABORT_SENT, policy="grace", source="ui"),
        ev(names.TOOL_STARTED, pid=4242, create_time=1.0),
    ]
    assert [v.invariant for v in check_invariants(events)] == [2]
    assert check_invariants(events[:-1]) == []


# --- a process tool that spawns on its own: recorded as started, said to be uncontained ---


async def test_a_process_tool_that_spawns_on_its_own_is_recorded_started_and_uncontained(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    rt = Runtime(LocalHost(), grace_s=GRACE, sink=FanOut(ledger, sink := MemorySink()))
    agent = Agent(FunctionModel(calls(ToolCallPart("build", {}, tool_call_id="b1"))))

    @agent.tool_plain(metadata={"turnwatch_class": "process"})
    async def build() -> str:
        proc = await asyncio.create_subprocess_exec("true")  # not through run_command
        return str(await proc.wait())

    await pydantic_ai.StoppableAgent(agent, rt).run("go", session="s")
    started = [e for e in sink if e.kind == names.TOOL_STARTED]
    assert [(e.call, e.attrs.get("pid")) for e in started] == [("b1", None)]
    ledger.close()
    shown = turnwatch("explain", "s", "--ledger", str(path), env={**os.environ, "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert "b1 (process) ran uncontained" in " ".join(shown.stdout.split())


def test_a_sync_process_tool_is_refused_by_both_wrappers(runtime: Runtime) -> None:
    """One rule: a process tool is async and starts its commands with run_command."""

    def sh() -> str:
        """Run a command."""
        return "done"

    agent = Agent(FunctionModel(calls()))
    agent.tool_plain(metadata={"turnwatch_class": "process"})(sh)
    with pytest.raises(pydantic_ai.ToolClassError, match="'sh': a process tool must be async"):
        pydantic_ai.StoppableAgent(agent, runtime)
    sdk = SdkAgent(name="a", tools=[openai_agents.tool_class(function_tool(sh), "process")])
    with pytest.raises(openai_agents.ToolClassError, match="'sh': a process tool must be async"):
        openai_agents.StoppableRunner(sdk, runtime)


# --- pydantic-ai: the user's own keywords compose with the wrapper's ---


def settled(sink: MemorySink) -> list[str]:
    return [str(e.attrs.get(names.K_OUTCOME)) for e in sink if e.kind == names.TURN_SETTLED]


def stop_sources(sink: MemorySink) -> list[str]:
    return [
        str(e.attrs.get(names.K_SOURCE))
        for e in sink
        if e.kind == names.ABORT_RPC_RECEIVED and e.attrs.get("receipt") == "accepted"
    ]


async def test_pydantic_ai_the_users_token_is_a_stop_of_its_own_run_and_ours_never_cancels_it(
    runtime: Runtime, sink: MemorySink
) -> None:
    token = CancellationToken()  # the user's, shared by two runs of two sessions
    models = {
        s: Agent(FunctionModel(calls(ToolCallPart("wait", {}, tool_call_id=f"{s}1"))))
        for s in ("a", "b")
    }
    gate = asyncio.Event()
    for agent in models.values():

        @agent.tool_plain(metadata={"turnwatch_class": "read_only"})
        async def wait() -> str:
            await gate.wait()
            return "waited"

    runs = {
        s: asyncio.ensure_future(
            pydantic_ai.StoppableAgent(a, runtime).run("go", session=s, cancellation_token=token)
        )
        for s, a in models.items()
    }
    await sink.wait_for(names.TOOL_STARTED, call="a1")
    await sink.wait_for(names.TOOL_STARTED, call="b1")
    assert await runtime.abort("a") is Receipt.ACCEPTED  # ours: session a's run alone
    with pytest.raises(RunCancelled):
        await runs["a"]
    assert not token.cancelled
    assert not runs["b"].done()
    token.cancel()  # the user's: the framework cancels b, and that is a stop, walked
    with pytest.raises(RunCancelled):
        await runs["b"]
    assert stop_sources(sink) == ["ui", "framework"]
    assert settled(sink) == ["aborted", "aborted"]
    assert outcomes(sink) == {"a1": "discarded", "b1": "discarded"}
    no_violations(sink)


async def test_pydantic_ai_capabilities_toolsets_and_deps_compose_with_the_wrapper(
    runtime: Runtime, sink: MemorySink
) -> None:
    seen: list[str] = []

    @dataclasses.dataclass
    class Audit(AbstractCapability[Any]):
        async def wrap_tool_execute(
            self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any
        ) -> Any:
            seen.append(f"{tool_def.name} {ctx.deps}")
            return await handler(args)

    extra = FunctionToolset[str]()

    @extra.tool_plain
    def late() -> str:
        return "late"

    agent = Agent(FunctionModel(calls(ToolCallPart("late", {}, tool_call_id="l1"))), deps_type=str)
    result = await pydantic_ai.StoppableAgent(agent, runtime).run(
        "go", session="s", capabilities=[Audit()], toolsets=[extra], deps="d"
    )
    assert seen == ["late d"]
    assert "late" in str(result.output)
    assert outcomes(sink) == {"l1": "completed"}  # a tool of a run's own toolset: extension
    assert settled(sink) == ["completed"]


async def test_pydantic_ai_a_run_that_raises_before_it_starts_is_never_recorded_completed(
    runtime: Runtime, sink: MemorySink
) -> None:
    agent = Agent(FunctionModel(calls()))
    with pytest.raises(TypeError):
        await pydantic_ai.StoppableAgent(agent, runtime).run("go", session="s", no_such_kw=1)
    assert settled(sink) == ["failed"]


# --- a wrapped run cancelled from outside is a stop ---


def sh_tool(run: Any) -> Any:
    async def sh() -> str:
        """Run a command."""
        return str((await run(["bash", "-c", TERM_IGNORING_TREE])).output)

    return sh


async def cancel_from_outside(how: str, run: Any) -> None:
    """Cancel the task awaiting ``run`` the way a caller does: a timeout, or a task group whose
    sibling fails."""
    if how == "wait_for":
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(run, 0.01)
        return

    async def sibling() -> None:
        await until(lambda: len(marked_alive()) >= 3, what="the tree to start")
        raise LookupError("a sibling failed")

    async def group() -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(run)
            tg.create_task(sibling())

    with pytest.raises(ExceptionGroup):
        await group()


@pytest.mark.parametrize("how", ["wait_for", "task_group"])
@pytest.mark.parametrize("framework", ["pydantic_ai", "openai_agents"])
async def test_a_run_cancelled_from_outside_is_a_stop_bounded_by_the_grace_window(
    runtime: Runtime, sink: MemorySink, how: str, framework: str
) -> None:
    if framework == "pydantic_ai":
        agent = Agent(FunctionModel(calls(ToolCallPart("sh", {}, tool_call_id="p1"))))
        agent.tool_plain(metadata={"turnwatch_class": "process"})(sh_tool(pydantic_ai.run_command))
        run: Any = pydantic_ai.StoppableAgent(agent, runtime).run("go", session="s")
    else:
        tool = openai_agents.tool_class(
            function_tool(sh_tool(openai_agents.run_command), name_override="sh"), "process"
        )
        sdk = SdkAgent(name="a", model=scripted(("sh", {}, "p1")), tools=[tool])
        run = openai_agents.StoppableRunner(sdk, runtime).run("go", session="s")
    started = asyncio.get_running_loop().time()
    if how == "wait_for":
        task = asyncio.ensure_future(run)
        await until(lambda: len(marked_alive()) >= 3, what="the tree to start")
        await cancel_from_outside(how, task)
    else:
        await cancel_from_outside(how, run)
    # Bounded: the stop's walk ended the tree within its grace window, and the cancel went on.
    assert asyncio.get_running_loop().time() - started < GRACE + CANCEL_SLACK_S + 10
    assert marked_alive() == []
    assert stop_sources(sink) == ["cancel"]
    assert settled(sink) == ["aborted"]
    assert outcomes(sink) == {"p1": "aborted"}
    no_violations(sink)


# --- the SDK: run_streamed() hands back the streamed run; its cancel() is the stop ---


def sdk_writer(name: str, target: Path) -> SdkAgent[Any]:
    """An SDK agent whose model asks for one large write to ``target`` (call ``w1``)."""
    write = function_tool(write_in_chunks, name_override="write")
    return SdkAgent(
        name=name, model=scripted(("write", {"path": str(target)}, "w1")), tools=[write]
    )


@pytest.mark.parametrize("mode", ["immediate", "after_turn"])
async def test_sdk_run_streamed_cancel_is_the_stop(
    runtime: Runtime, sink: MemorySink, tmp_path: Path, mode: str
) -> None:
    target = tmp_path / "big"
    agent = sdk_writer("a", target)
    stream = openai_agents.StoppableRunner(agent, runtime).run_streamed("go", session="s")
    assert isinstance(stream.result, RunResultStreaming)

    async def consume() -> None:
        async for _ev in stream.stream_events():
            pass

    task = asyncio.ensure_future(consume())
    await until(lambda: begun(target), what="the write to begin")
    stream.cancel(mode)
    with pytest.raises(openai_agents.RunStopped):
        await task
    assert target.stat().st_size == CHUNKS * len(CHUNK)  # awaited whole, either way
    want = "completed_after_stop" if mode == "immediate" else "completed"
    assert outcomes(sink) == {"w1": want}
    assert stop_sources(sink) == ["framework"]
    assert settled(sink) == ["aborted"]
    no_violations(sink)


# --- the SDK: handoffs reach agents whose tools are wrapped too ---


@pytest.mark.parametrize("as_object", [False, True], ids=["agent", "handoff()"])
async def test_sdk_a_handoffs_target_runs_its_tools_as_calls_of_the_run(
    runtime: Runtime, sink: MemorySink, tmp_path: Path, as_object: bool
) -> None:
    target = tmp_path / "big"
    writer = sdk_writer("writer", target)
    triage = SdkAgent(
        name="triage",
        model=scripted(("transfer_to_writer", {}, "h1")),
        handoffs=[handoff(writer) if as_object else writer],
    )
    writer.handoffs = [triage]  # a cycle: each agent is wrapped once
    run = asyncio.ensure_future(
        openai_agents.StoppableRunner(triage, runtime).run("go", session="s")
    )
    await until(lambda: begun(target), what="the writer's write to begin")
    assert await runtime.abort("s") is Receipt.ACCEPTED
    # abort() returned once the write was whole: the walk saw it, and awaited it.
    assert target.stat().st_size == CHUNKS * len(CHUNK)
    with pytest.raises(openai_agents.RunStopped):
        await run
    walk = next(e for e in sink if e.kind == names.ABORT_WALK_STARTED)
    assert walk.attrs[names.K_INFLIGHT] == 1
    assert outcomes(sink) == {"w1": "completed_after_stop"}
    no_violations(sink)


async def test_sdk_a_consumer_that_stops_iterating_stops_the_run(
    runtime: Runtime, sink: MemorySink, tmp_path: Path
) -> None:
    target = tmp_path / "big"
    stream = openai_agents.StoppableRunner(sdk_writer("a", target), runtime).run_streamed(
        "go", session="s"
    )
    events = stream.stream_events()
    await anext(events)  # the consumer read the run's first event ...
    await until(lambda: begun(target), what="the write to begin")
    await events.aclose()  # ... and went away mid-write (what a `break` leads to)
    assert stop_sources(sink) == ["cancel"]
    assert target.stat().st_size == CHUNKS * len(CHUNK)  # the write, awaited whole
    no_violations(sink)
