"""The Agents SDK's hosted MCP tool (``HostedMCPTool``) with approvals, wrapped: the provider runs
the server's tool, but only once the run says it is approved, and the wrapper says that.

Each approval the provider asks for is a permission prompt of the turn, as a function tool's
is: an approval given after the stop reaches the provider as a rejection, so the tool never
runs; one given in time reaches it as given.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, HostedMCPTool
from agents.testing import ModelStep, ScriptedModel, assistant_message
from openai.types.responses.response_output_item import McpApprovalRequest

from tests.integrations.test_openai_agents import approved_after_the_stop, approved_in_time
from tests.integrations.test_sdk_shell import streamed
from tests.integrations.verdicts import no_violations
from turnwatch import names
from turnwatch.integrations.openai_agents import StoppableRunner
from turnwatch.runtime import MemorySink, Runtime


def deploying() -> tuple[Agent[Any], ScriptedModel]:
    """An agent whose model (the provider) asks to approve the ``ops`` server's ``deploy``,
    then says it is done; and the model, which records what it was sent."""
    asked = McpApprovalRequest(
        id="mcpr_1",
        type="mcp_approval_request",
        name="deploy",
        server_label="ops",
        arguments='{"env": "prod"}',
    )
    model = ScriptedModel([streamed(asked), ModelStep(output=[assistant_message("done")])])
    tool = HostedMCPTool(
        tool_config={
            "type": "mcp",
            "server_label": "ops",
            "server_url": "https://mcp.invalid/ops",
            "require_approval": "always",
        }
    )
    return Agent(name="a", model=model, tools=[tool]), model


def answers_sent(model: ScriptedModel) -> list[tuple[str, bool]]:
    """The approvals the provider was told of: (request id, approved)."""
    out = []
    for call in model.calls:
        for item in call.input if isinstance(call.input, list) else []:
            got = item if isinstance(item, dict) else item.model_dump()
            if got.get("type") == "mcp_approval_response":
                out.append((got["approval_request_id"], got["approve"]))
    return out


async def test_an_approval_given_after_the_stop_reaches_the_provider_as_a_rejection(
    runtime: Runtime, sink: MemorySink
) -> None:
    agent, model = deploying()
    await approved_after_the_stop(StoppableRunner(agent, runtime), runtime, sink)
    assert answers_sent(model) == [("mcpr_1", False)]
    (asked,) = sink.of(names.PERMISSION_REQUESTED)
    assert (asked.call, asked.tool) == ("mcpr_1", "deploy")
    no_violations(sink)


async def test_an_approval_given_in_time_reaches_the_provider_as_given(
    runtime: Runtime, sink: MemorySink
) -> None:
    agent, model = deploying()
    result = await approved_in_time(StoppableRunner(agent, runtime))
    assert result.final_output == "done"
    assert answers_sent(model) == [("mcpr_1", True)]
    assert [e.kind for e in sink if e.kind.startswith("permission.")] == [
        names.PERMISSION_REQUESTED,
        names.PERMISSION_GRANTED,
    ]
    no_violations(sink)
