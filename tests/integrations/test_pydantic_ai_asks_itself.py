"""pydantic-ai: a tool that asks its user itself (``raise ApprovalRequired`` until
``ctx.tool_call_approved``), the framework's documented dynamic approval.

Its first run ended asking, not failing; the run ends with the approval to give, and the turn
waits on it (a permission can still be approved). The approved run is the prompt's call, under
an id of its own (the tool's id ran already); an approval sent after a stop is refused, and the
tool is not run again.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, RunContext
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from turnwatch import names
from turnwatch.integrations.pydantic_ai import STOPPED, StoppableAgent
from turnwatch.runtime import MemorySink, Receipt, Runtime
from turnwatch.testing import check_invariants


class Payment:
    """An agent whose one tool asks its user before it pays, and what it was told."""

    def __init__(self) -> None:
        self.ran: list[bool] = []  # each run of the tool: was it approved?
        self.told: list[str] = []  # what the model was told of the call

        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if len(messages) == 1:
                return ModelResponse(parts=[ToolCallPart("pay", {"amount": 3}, "a1")])
            last = messages[-1]
            if isinstance(last, ModelRequest):
                self.told += [str(p.content) for p in last.parts if isinstance(p, ToolReturnPart)]
            return ModelResponse(parts=[TextPart("ok")])

        self.agent: Agent[None, str | DeferredToolRequests] = Agent(
            FunctionModel(model), output_type=[str, DeferredToolRequests]
        )

        @self.agent.tool
        def pay(ctx: RunContext[None], amount: int) -> str:
            self.ran.append(ctx.tool_call_approved)
            if not ctx.tool_call_approved:
                raise ApprovalRequired()
            return "paid"


@pytest.fixture
def rt(runtime: Runtime) -> Runtime:
    return runtime


async def answer(wrapped: StoppableAgent[Any, Any], first: Any, approved: bool) -> Any:
    return await wrapped.run(
        message_history=first.all_messages(),
        session="s",
        deferred_tool_results=DeferredToolResults(approvals={"a1": approved}),
    )


def kinds(sink: MemorySink, call: str) -> list[str]:
    return [e.kind for e in sink if e.call == call]


async def asked(rt: Runtime) -> tuple[Payment, StoppableAgent[Any, Any], Any]:
    """The payment agent, wrapped, run until its tool asked: the agent, the wrapper, the run."""
    p = Payment()
    wrapped = StoppableAgent(p.agent, rt)
    return p, wrapped, await wrapped.run("pay", session="s")


def kept_nothing(wrapped: StoppableAgent[Any, Any], sink: MemorySink) -> None:
    """The turn is over, and nothing of it is kept; the ledger's story holds."""
    assert not wrapped.dispatch.slots
    assert not wrapped.dispatch.renamed
    assert check_invariants(list(sink)) == []


async def test_its_first_run_asked_and_the_approved_run_is_the_prompts(
    rt: Runtime, sink: MemorySink
) -> None:
    p, wrapped, first = await asked(rt)
    assert isinstance(first.output, DeferredToolRequests)
    assert rt.sessions["s"].processing  # it waits on the approval
    # Its first run ended asking its user: completed, not failed.
    finished = [e for e in sink if e.kind == names.TOOL_FINISHED and e.call == "a1"]
    assert [e.attrs["outcome"] for e in finished] == ["completed"]
    (prompt,) = {e.call for e in sink if e.kind == names.PERMISSION_REQUESTED}
    assert prompt is not None
    assert prompt != "a1"

    second = await answer(wrapped, first, True)
    assert second.output == "ok"
    assert p.ran == [False, True]
    assert p.told == ["paid"]
    assert kinds(sink, prompt)[-3:] == [
        names.PERMISSION_GRANTED,
        names.TOOL_STARTED,
        names.TOOL_FINISHED,
    ]
    assert not rt.sessions["s"].processing
    kept_nothing(wrapped, sink)


async def test_an_approval_after_the_stop_never_runs_it_again(
    rt: Runtime, sink: MemorySink
) -> None:
    p, wrapped, first = await asked(rt)
    assert await rt.abort("s") is Receipt.ACCEPTED
    assert not rt.sessions["s"].processing
    second = await answer(wrapped, first, True)  # the prompt was still on screen
    assert second.output == "ok"
    assert p.ran == [False]  # never run again: nothing paid
    assert p.told == [STOPPED]
    assert any(e.kind == names.PERMISSION_LATE for e in sink)
    kept_nothing(wrapped, sink)


async def test_a_denial_is_told_to_the_model_and_never_runs_it(
    rt: Runtime, sink: MemorySink
) -> None:
    p, wrapped, first = await asked(rt)
    second = await answer(wrapped, first, False)
    assert second.output == "ok"
    assert p.ran == [False]
    assert any(e.kind == names.PERMISSION_DENIED for e in sink)
    assert not rt.sessions["s"].processing
    kept_nothing(wrapped, sink)


async def test_a_tool_that_defers_itself_is_not_recorded_failed(
    rt: Runtime, sink: MemorySink
) -> None:
    """``raise CallDeferred``: the tool hands its work to outside the run (its result comes in
    a later run's ``deferred_tool_results``). Its call ran until then; it did not fail."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("build", {}, "b1")])
        return ModelResponse(parts=[TextPart("ok")])

    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(model), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain
    def build() -> str:
        raise CallDeferred()

    wrapped = StoppableAgent(agent, rt)
    first = await wrapped.run("build it", session="s")
    assert isinstance(first.output, DeferredToolRequests)
    assert [c.tool_call_id for c in first.output.calls] == ["b1"]
    finished = [e.attrs["outcome"] for e in sink if e.kind == names.TOOL_FINISHED]
    assert finished == ["completed"]
    assert not rt.sessions["s"].processing  # nothing of the turn's waits on its user
    assert check_invariants(list(sink)) == []
