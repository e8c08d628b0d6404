"""The OpenAI Agents SDK under the ADR's stop: each run a turnwatch turn, each function tool call a
turnwatch call.

``pip install 'turnwatch[openai-agents]'``. The only module that imports the SDK (``agents``).

    rt = Runtime(LocalHost(), sink=Ledger("ledger.sqlite3"))
    runner = StoppableRunner(Agent(name="dev", model=model, tools=[...]), rt)
    result = await runner.run("fix the build", session="s1")   # elsewhere: await rt.abort("s1")

The SDK's gaps, and what the wrapper does about each:

- ``Runner.run`` has no stop token: every run is a streamed run, and a stop is
  ``cancel("immediate")`` of it. ``run()`` then waits for turnwatch's own record of the calls in
  flight, not for the SDK, and raises :class:`RunStopped` once the turn has settled.
- Sync function tools run through ``asyncio.to_thread``, whose threads outlive a cancel and keep
  the interpreter from exiting: the wrapper sets the running loop's default executor to one of
  daemon threads (for the loop's life: ``to_thread`` elsewhere gets daemon threads too).
- Each ``FunctionTool`` of the agent, and of every agent its handoffs and agent tools reach
  (recursively, cycles allowed; a ``handoff()`` object's agent once the handoff happens), runs
  under the policy of its class, from :func:`tool_class` or ``classes=`` (else
  ``default_class``, ``mutating``, so a tool nobody classified is never abandoned):
  ``read_only`` raced and discarded, ``process`` tools (async, starting commands with
  :func:`run_command`) terminated after the grace window, ``mutating`` and ``extension``
  awaited. An agent used ``as_tool`` is a call of its parent's
  (class ``mutating`` unless said) whose nested run starts with the agent wrapped: its calls are
  the turn's (their ids ``{agent-tool call}/{call}``), and the stop cancels the nested run as it
  does the parent's (:mod:`.nesting`).
- ``needs_approval`` tools: the run's interruptions are turnwatch permission prompts, and the turn
  stays live until the run is resumed. An approval given after a stop (``RunState.approve``,
  whoever calls it) is refused when the run resumes: the call is rejected, and the ledger
  records ``permission.late``.
- An MCP server's tools (``Agent(mcp_servers=[...])``, which the SDK builds as each model turn
  begins) are wrapped as they come: ``extension`` calls (unless ``classes=`` says otherwise),
  awaited at a stop until the server replied, the server told of the stop (its cancel naming
  the call's own request).
- A shell tool with a local executor (``ShellTool``, ``LocalShellTool``): each shell call a
  turnwatch call; :func:`shell_executor` (:func:`local_shell_executor`) runs the model's
  commands contained, as a ``process`` call (:mod:`.shell`).
- The apply-patch tool (``ApplyPatchTool``): each operation its editor is handed a turnwatch
  call under the model's call id, ``mutating`` unless said (:mod:`.apply_patch`); a custom tool
  (``CustomTool``) each call a turnwatch call (:mod:`.custom`); the computer tool
  (``ComputerTool``) each call's batch of actions a turnwatch call (:mod:`.computer`).
- Hosted tools (web search, file search, code interpreter) run on the provider's side, where
  turnwatch cannot reach them: observed, not enforced (the README's table).
- The SDK traces a run its own way (not OpenTelemetry): turnwatch's spans of the run (the stop,
  ``execute_tool`` per call) take the SDK trace's id, and :class:`FunctionSpans` (a trace
  processor the wrapper adds once) turns the SDK's function spans into OpenTelemetry spans of
  that trace, so one trace shows the run's tool calls as the SDK saw them and as the stop did.
"""

from turnwatch.integrations.openai_agents.runner import (
    StoppableRunner,
    UnwrappedToolWarning,
    tool_class,
    typed_invoker,
)
from turnwatch.integrations.openai_agents.shell import local_shell_executor, shell_executor
from turnwatch.integrations.openai_agents.spans import FunctionSpans
from turnwatch.integrations.openai_agents.stream import RunStopped, StoppableStream
from turnwatch.integrations.wrappers import (
    CLASS_KEY,
    STOPPED,
    CommandAbortedError,
    CommandResult,
    ToolClassError,
    run_command,
)

__all__ = [
    "CLASS_KEY",
    "STOPPED",
    "CommandAbortedError",
    "CommandResult",
    "FunctionSpans",
    "RunStopped",
    "StoppableRunner",
    "StoppableStream",
    "ToolClassError",
    "UnwrappedToolWarning",
    "local_shell_executor",
    "run_command",
    "shell_executor",
    "tool_class",
    "typed_invoker",
]
