"""An approval sent after a restart, for a prompt the user's Stop closed before it.

The agent's process restarts (a deploy, a crash) between the Stop and the approval: its new
runtime knows nothing of the prompt, and every wrapper handed the approval to its framework as
"not a prompt of ours", which ran the tool. Writing the ledger the process before wrote (its
sink), the new runtime reads it and refuses the approval: the tool never runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents import RunState
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from pydantic_ai import DeferredToolResults

from tests.conftest import GRACE
from tests.integrations.adk_parts import (
    HI,
    Writes,
    asked,
    call,
    confirm,
    consume,
    model,
    new_session,
    says,
)
from tests.integrations.pai_parts import approval_agent
from tests.integrations.test_openai_agents import approval_agent as sdk_approval_agent
from turnwatch import names
from turnwatch.integrations.google_adk import StoppableRunner, TurnwatchPlugin
from turnwatch.integrations.openai_agents import StoppableRunner as SdkRunner
from turnwatch.integrations.pydantic_ai import STOPPED, StoppableAgent
from turnwatch.runtime import FanOut, LocalHost, MemorySink, Receipt, Runtime
from turnwatch.tracing import Ledger


class Process:
    """One life of the agent's process: a runtime writing the ledger at ``path``, which reads
    what the lives before it recorded."""

    def __init__(self, path: Path) -> None:
        self.seen = MemorySink()
        self.ledger = Ledger(path)
        # No past=: the ledger it writes is what it reads.
        self.rt = Runtime(LocalHost(), grace_s=GRACE, sink=FanOut(self.seen, self.ledger))

    def end(self) -> None:
        self.ledger.close()

    def late(self) -> bool:
        return any(e.kind == names.PERMISSION_LATE for e in self.seen)


async def test_pydantic_ai_a_stop_before_the_restart_refuses_the_approval_after_it(
    tmp_path: Path,
) -> None:
    target = tmp_path / "keep-me"
    target.write_text("precious")
    agent, seen = approval_agent(target)
    before = Process(tmp_path / "ledger.sqlite3")
    first = await StoppableAgent(agent, before.rt).run("clean up", session="s")
    assert await before.rt.abort("s") is Receipt.ACCEPTED  # the user clicks Stop
    before.end()  # … and the process restarts

    after = Process(tmp_path / "ledger.sqlite3")
    try:
        second = await StoppableAgent(agent, after.rt).run(
            message_history=first.all_messages(),
            session="s",
            deferred_tool_results=DeferredToolResults(approvals={"a1": True}),
        )
    finally:
        after.end()
    assert second.output == "ok"
    assert target.read_text() == "precious"  # never deleted
    assert seen == [STOPPED]
    assert after.late()


async def test_adk_a_stop_before_the_restart_refuses_the_confirmation_after_it(
    tmp_path: Path,
) -> None:
    w = Writes()
    llm = model(says(call("w1", "write", text="a")))

    def life(path: Path, sessions: Any = None) -> tuple[Process, Runner, StoppableRunner]:
        proc = Process(path)
        agent = LlmAgent(name="a", model=llm, tools=[w.tool])
        app = App(name="app", root_agent=agent, plugins=[TurnwatchPlugin(proc.rt, [w.tool])])
        runner = Runner(app=app, session_service=sessions or InMemorySessionService())
        return proc, runner, StoppableRunner(runner, proc.rt)

    before, runner, wrapped = life(tmp_path / "ledger.sqlite3")
    sid = await new_session(runner)  # type: ignore[arg-type]
    (request,) = asked(
        await consume(wrapped.run_async(user_id="u", session_id=sid, new_message=HI))
    )
    assert await before.rt.abort(sid) is Receipt.ACCEPTED
    before.end()

    after, runner, wrapped = life(tmp_path / "ledger.sqlite3", runner.session_service)
    try:
        answer = confirm(request, True)
        await consume(wrapped.run_async(user_id="u", session_id=sid, new_message=answer))
    finally:
        after.end()
    assert w.written == []  # the tool never ran
    assert after.late()


async def test_agents_sdk_a_saved_run_state_approved_after_the_restart_is_refused(
    tmp_path: Path,
) -> None:
    """The SDK's own pattern for an approval that comes later: the run's state saved
    (``to_string``), and resumed from it in another process with the user's answer."""
    target = tmp_path / "f"
    ran: list[str] = []
    agent = sdk_approval_agent(target, ran)
    before = Process(tmp_path / "ledger.sqlite3")
    result = await SdkRunner(agent, before.rt).run("go", session="s")
    assert result.interruptions
    saved = result.to_state().to_string()
    assert await before.rt.abort("s") is Receipt.ACCEPTED
    before.end()

    after = Process(tmp_path / "ledger.sqlite3")
    try:
        state = await RunState.from_string(agent, saved)
        state.approve(state.get_interruptions()[0])  # the prompt still on the user's screen
        await SdkRunner(agent, after.rt).run(state, session="s")
    finally:
        after.end()
    assert ran == []
    assert not target.exists()
    assert after.late()


class Asked:
    """A ``PastCalls`` that says nothing was resolved, and keeps what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def resolved(self, session: str, call: str) -> bool:
        self.asked.append((session, call))
        return False


async def test_an_answer_to_a_prompt_of_this_runtime_reads_no_ledger(tmp_path: Path) -> None:
    """The ledger is read only for a call this runtime does not know: an approval of its own
    prompt, the common case, costs the event loop no read."""
    target = tmp_path / "old-file"
    target.write_text("old")
    agent, _seen = approval_agent(target)
    past = Asked()
    rt = Runtime(LocalHost(), grace_s=GRACE, past=past)
    wrapped = StoppableAgent(agent, rt)
    first = await wrapped.run("clean up", session="s")
    await wrapped.run(
        message_history=first.all_messages(),
        session="s",
        deferred_tool_results=DeferredToolResults(approvals={"a1": True}),
    )
    assert not target.exists()  # approved, and run
    assert past.asked == []
