"""The SDK's computer tool (``ComputerTool``): each batch of actions the model asks for is a
turnwatch call of the run's turn, under the model's call id.

The SDK runs a computer call's actions (click, type, scroll, ...) and the screenshot that ends
them on the tool's computer, in this process, outside any function tool: unwrapped, a stop never
saw the call, and the SDK's cancel stopped the batch between two actions or inside an async
driver's one. Wrapped, the batch is one turnwatch call of the tool's class: ``mutating`` unless
said (``tool_class`` or ``classes=``), awaited, so the actions the stop finds under way end
whole, and a batch the stop came before never starts. A computer runs no process of
turnwatch's: never ``process``.

The computer is handed the actions alone, not their call: the SDK's ``ComputerAction`` (private
to the SDK; the version is pinned, and the tests fail when it moves) is wrapped once per process,
its ``execute`` to say which call and tool the actions are of, its
``_execute_action_and_capture`` to run them as that call. For a tool no runner wrapped, or
outside a wrapped run, they do nothing else.
"""

from __future__ import annotations

import dataclasses
from contextvars import ContextVar
from typing import Any

from agents import ComputerTool
from agents.run_internal.tool_actions import ComputerAction

from turnwatch.integrations.openai_agents.local import RunCall, said_while_running
from turnwatch.integrations.wrappers import RUN_TURN

__all__ = ["install", "wrapped_computer"]

#: Where a wrapped copy of a tool keeps how its runner runs a call (on the copy, not in a
#: table of this module's: a runner dropped takes its copies with it).
_RUN = "_turnwatch_run_call"
#: The call whose actions are being run: (its tool's name, its id or None, how it runs).
_CALL: ContextVar[tuple[str, str | None, RunCall] | None] = ContextVar(
    "turnwatch_sdk_computer_call", default=None
)


def install() -> None:
    """Wrap the SDK's ``ComputerAction`` (once per process): a wrapped tool's batch of actions
    runs as a turnwatch call."""
    if not said_while_running(ComputerAction, "execute", _CALL, _call_of):
        return
    capture = ComputerAction._execute_action_and_capture  # noqa: SLF001 - see the module

    async def capture_(cls: type[ComputerAction], computer: Any, tool_call: Any) -> Any:
        said, turn = _CALL.get(), RUN_TURN.get()
        if said is None or turn is None:
            return await capture(computer, tool_call)
        name, call_id, run = said
        args = {"actions": _action_types(tool_call)}
        return await run(
            turn,
            name,
            call_id or turn.next_call_id(),
            args,
            lambda: capture(computer, tool_call),
        )

    ComputerAction._execute_action_and_capture = classmethod(capture_)  # type: ignore[method-assign,assignment]  # noqa: SLF001


def _call_of(kwargs: dict[str, Any]) -> tuple[str, str | None, RunCall] | None:
    """The call whose actions ``execute`` runs, if its tool is a wrapped copy: (the tool's
    name, the call's id, how its runner runs it)."""
    action = kwargs["action"]
    run = getattr(action.computer_tool, _RUN, None)
    return None if run is None else (action.computer_tool.name, _call_id(action), run)


def _call_id(action: Any) -> str | None:
    call_id = getattr(action.tool_call, "call_id", None)
    return call_id if isinstance(call_id, str) and call_id else None


def _action_types(tool_call: Any) -> list[str]:
    """What the batch does, as the ledger keeps it: each action's type (never its text or
    where it clicks)."""
    actions = getattr(tool_call, "actions", None) or [getattr(tool_call, "action", None)]
    out = []
    for action in actions:
        kind = action.get("type") if isinstance(action, dict) else getattr(action, "type", None)
        if isinstance(kind, str):
            out.append(kind)
    return out


def wrapped_computer(tool: ComputerTool[Any], call: RunCall) -> ComputerTool[Any]:
    """A copy of ``tool`` whose batches of actions run as turnwatch calls (``call``) of the
    run's turn; outside a wrapped run, as the SDK runs them. Call :func:`install` once."""
    copy = dataclasses.replace(tool)
    setattr(copy, _RUN, call)
    return copy
