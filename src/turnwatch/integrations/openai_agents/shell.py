"""The SDK's shell tools (``ShellTool`` with a local executor, and ``LocalShellTool``): each
shell call a turnwatch call, and :func:`shell_executor` and :func:`local_shell_executor`,
executors whose commands run contained.

The SDK runs a shell call by handing the model's commands to the tool's executor, in this
process, outside any function tool: unwrapped, a stop never saw it, and the SDK's cancel left
the commands' processes running. Wrapped, the call is a turnwatch call of its tool's class:
``process`` for :func:`shell_executor` (its commands in a cgroup or process group of the call,
ended within the grace window at a stop), and for an executor of the application's own the
class it is given (``tool_class`` or ``classes=``; ``process`` only for an async executor that
starts its commands with ``run_command``), else the runner's default (``mutating``: awaited).
``LocalShellTool`` the same, ``process`` with :func:`local_shell_executor` (its command an argv).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from agents import LocalShellTool, ShellTool
from agents.tool import (
    LocalShellCommandRequest,
    ShellCallOutcome,
    ShellCommandOutput,
    ShellCommandRequest,
    ShellResult,
)

from turnwatch.integrations.openai_agents.local import RunCall, result_of
from turnwatch.integrations.wrappers import CLASS_KEY, RUN_TURN, run_command
from turnwatch.runtime.model import ToolClass

__all__ = ["local_shell_executor", "shell_executor", "wrapped_shell"]


async def shell_executor(request: ShellCommandRequest) -> ShellResult:
    """Run the model's commands one after another, each with ``bash -c`` through
    ``run_command``: contained, ended at a stop within the grace window. Each command's output
    (stdout and stderr, in order) and exit code go back to the model. For a wrapped run only
    (outside one, ``run_command`` refuses). The action's ``timeout_ms`` is not applied: a command
    runs until it ends or a stop ends it (a cancel would end its first process, not its tree)."""
    outputs = []
    for command in request.data.action.commands:
        done = await run_command(["bash", "-c", command])
        outcome = ShellCallOutcome(type="exit", exit_code=done.exit_code)
        outputs.append(ShellCommandOutput(stdout=done.output, outcome=outcome, command=command))
    return ShellResult(output=outputs)


async def local_shell_executor(request: LocalShellCommandRequest) -> str:
    """``LocalShellTool``'s executor: the model's command (an argv, in its working directory,
    with its environment added) through ``run_command``, contained, ended at a stop within the
    grace window; what it printed (stdout and stderr, in order) goes back to the model, with its
    exit code unless 0. For a wrapped run only; ``timeout_ms`` is not applied (see
    :func:`shell_executor`)."""
    action = request.data.action
    done = await run_command(
        list(action.command), cwd=action.working_directory or None, env=action.env or None
    )
    return done.output if done.exit_code == 0 else f"{done.output}\n(exit code {done.exit_code})"


_OURS = (shell_executor, local_shell_executor)


def shell_class(tool: ShellTool | LocalShellTool) -> ToolClass | str | None:
    """The class a shell tool says it is (``tool_class``), or ``process`` for one whose
    executor is ours; None: the runner decides."""
    declared: ToolClass | str | None = getattr(tool, CLASS_KEY, None)
    if declared is None and tool.executor in _OURS:
        return ToolClass.PROCESS
    return declared


def wrapped_shell(tool: ShellTool | LocalShellTool, call: RunCall) -> ShellTool | LocalShellTool:
    """``tool`` whose executor runs each shell call as a turnwatch call (``call``) of the run's
    turn; outside a wrapped run, the executor as it was."""
    executor: Callable[[Any], Any] | None = tool.executor
    assert executor is not None  # a hosted shell tool (no executor) runs nothing here

    async def run(request: Any) -> Any:
        return await result_of(executor(request))

    async def execute(request: Any) -> Any:
        turn = RUN_TURN.get()
        if turn is None:
            return await run(request)
        action = request.data.action
        args = (
            {"commands": list(action.commands)}
            if isinstance(tool, ShellTool)
            else {"command": list(action.command)}
        )
        return await call(turn, tool.name, request.data.call_id, args, lambda: run(request))

    return dataclasses.replace(tool, executor=execute)
