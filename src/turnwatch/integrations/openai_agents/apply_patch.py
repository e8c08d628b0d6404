"""The SDK's apply_patch tool (``ApplyPatchTool``): each operation its editor is handed a
turnwatch call of the run's turn, under the model's call id.

The SDK hands each operation of an apply_patch call (create, update or delete a file) to the
tool's editor, in this process, outside any function tool: unwrapped, a stop never saw it, and
the SDK's cancel stopped an async editor halfway through a file. Wrapped, each operation is a
turnwatch call of the tool's class: ``mutating`` unless said (``tool_class`` or ``classes=``),
awaited, so a file the editor writes at the stop is written whole, and an operation the stop
came before never starts. An editor runs no process of turnwatch's: never ``process``.

The editor is handed the operation alone, not the id of its call, which the ledger and the
call's approval go by: the SDK's ``ApplyPatchAction.execute`` (private to the SDK; the version is
pinned, and the tests fail when it moves) is wrapped once per process to say which call the
operations it hands out are of. Outside a wrapped run it does nothing else; should the SDK
move it, an operation goes under an id of the turn's own.
"""

from __future__ import annotations

import dataclasses
from contextvars import ContextVar
from typing import Any

from agents import ApplyPatchTool
from agents.editor import ApplyPatchOperation
from agents.run_internal.tool_actions import ApplyPatchAction
from agents.run_internal.tool_execution import extract_apply_patch_call_id

from turnwatch.integrations.openai_agents.local import RunCall, result_of, said_while_running
from turnwatch.integrations.wrappers import RUN_TURN

__all__ = ["install", "wrapped_patch"]

#: The apply_patch call whose operations are being handed to its editor: [its id, how many of
#: its operations began] (an id is used once in a session: a second operation of one call goes
#: under ``{id}#2``).
_CALL: ContextVar[list[Any] | None] = ContextVar("turnwatch_sdk_apply_patch_call", default=None)


def install() -> None:
    """Wrap the SDK's ``ApplyPatchAction.execute`` (once per process) to say which call the
    operations it hands to an editor are of."""
    said_while_running(ApplyPatchAction, "execute", _CALL, _call_of)


def _call_of(kwargs: dict[str, Any]) -> list[Any]:
    """The call whose operations ``execute`` hands out: [its id, 0 operations begun], by the
    SDK's own reading of it (the raw call may be a mapping or a model). No call, or no id: the
    operations go under the turn's own ids."""
    return [extract_apply_patch_call_id(kwargs["call"].tool_call), 0]


class _Editor:
    """An editor whose operations run as turnwatch calls of the run's turn (``call``)."""

    def __init__(self, editor: Any, tool: str, call: RunCall) -> None:
        self.editor, self.tool, self.call = editor, tool, call

    async def create_file(self, operation: ApplyPatchOperation) -> Any:
        return await self._run("create_file", operation)

    async def update_file(self, operation: ApplyPatchOperation) -> Any:
        return await self._run("update_file", operation)

    async def delete_file(self, operation: ApplyPatchOperation) -> Any:
        return await self._run("delete_file", operation)

    async def _run(self, name: str, operation: ApplyPatchOperation) -> Any:
        method = getattr(self.editor, name)

        async def run() -> Any:
            return await result_of(method(operation))

        turn = RUN_TURN.get()
        if turn is None:  # outside a wrapped run: the SDK's own
            return await run()
        said = _CALL.get()
        if said is None:  # the SDK no longer says which call: an id of the turn's own
            call_id = turn.next_call_id()
        else:
            said[1] += 1
            call_id = said[0] if said[1] == 1 else f"{said[0]}#{said[1]}"
        args = {"operation": operation.type, "path": operation.path}
        if operation.move_to:
            args["move_to"] = operation.move_to
        return await self.call(turn, self.tool, call_id, args, run)


def wrapped_patch(tool: ApplyPatchTool, call: RunCall) -> ApplyPatchTool:
    """``tool`` whose editor runs each operation as a turnwatch call (``call``) of the run's
    turn; outside a wrapped run, the editor's own."""
    return dataclasses.replace(tool, editor=_Editor(tool.editor, tool.name, call))
