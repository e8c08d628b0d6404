"""ADK's tool confirmations in a wrapped run: the turn's pending permissions. Requires the
``google-adk`` extra.

A tool that requires confirmation (``FunctionTool(…, require_confirmation=True)``, or one that
calls ``tool_context.request_confirmation()`` itself) ends ADK's run with an
``adk_request_confirmation`` function call; the user's answer is the next run's message, a
function response to it (``{"confirmed": …}``). Until it comes, a permission can still be
approved, so the turn does not settle: each request is a call of the turn with its prompt open
(``permission.requested``), under the request's id (the id the answer names: the tool's own id
may have run already, when the tool asked its user itself). The answer goes through the runtime
(confirmed: granted, else denied) and the turn goes on in the run ADK re-runs the tool in. A
stop while it waits closes the prompt and settles the turn; a confirmation sent after it is
refused (``permission.late``) and handed to ADK as a rejection, so the tool never runs.
"""

from __future__ import annotations

import functools
from typing import Any

from google.adk.flows.llm_flows.functions import REQUEST_CONFIRMATION_FUNCTION_CALL_NAME
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types

from turnwatch.integrations.wrappers import Dispatcher
from turnwatch.runtime.gate import Answer
from turnwatch.runtime.model import Phase, ToolClass
from turnwatch.runtime.runtime import Runtime
from turnwatch.runtime.turn import Turn

__all__ = ["CONFIRM", "answer", "ask", "waits"]

#: The function call ADK asks its user's confirmation with.
CONFIRM = REQUEST_CONFIRMATION_FUNCTION_CALL_NAME


def ask(turn: Turn, dispatch: Dispatcher, event: Any) -> None:
    """Each confirmation ``event`` asks for, a call of ``turn`` with its prompt open (so an
    answer given at once finds it): the tool and arguments of the call it holds, under the
    request's id, which the tool's confirmed run is renamed to. A turn the stop reached
    refuses it (and a confirmation later is late)."""
    if not event.content or not event.content.parts:
        return  # most events: text, a model's calls, their answers
    session = turn.session.id
    for fc in event.get_function_calls():
        held = (fc.args or {}).get("originalFunctionCall") if fc.name == CONFIRM else None
        if not isinstance(held, dict) or not fc.id or not held.get("name") or fc.id in turn.calls:
            continue  # not a confirmation request, or one asked already (an event seen again)
        name, args = str(held["name"]), dict(held.get("args") or {})
        slot = dispatch.slot(session, fc.id)
        cls = dispatch.classes.get(name, ToolClass.MUTATING)
        slot.handle = turn.request(
            name, args, call_id=fc.id, tool_class=cls.value, ask_permission=True
        )
        if held.get("id"):
            dispatch.renamed[(session, str(held["id"]))] = fc.id
        # Once the turn settles no run of it takes the call: its slot and its name go (a
        # turn the stop settled before its run ended never waited for its answers).
        turn.settled.add_done_callback(functools.partial(_let_go, dispatch, session, fc.id))


def _let_go(dispatch: Dispatcher, session: str, call: str, _settled: object) -> None:
    dispatch.release(session, (call,))


def waits(turn: Turn) -> bool:
    """True while a call of ``turn`` waits for its user's answer."""
    return any(c.phase is Phase.AWAITING_PERMISSION for c in turn.calls.values())


def answer(runtime: Runtime, dispatch: Dispatcher, session: str, message: Any) -> tuple[Any, bool]:
    """The confirmations in ``message`` answered through the runtime: the message ADK is given
    (one refused as late turned into a rejection), and whether it answered any prompt of ours.
    An answer ADK cannot read raises ``ValueError`` (one line) before any is answered."""
    parts = list(getattr(message, "parts", None) or ())
    said: dict[int, tuple[str, ToolConfirmation]] = {}
    for i, part in enumerate(parts):
        fr = part.function_response
        if fr is not None and fr.name == CONFIRM and fr.id:
            try:
                said[i] = fr.id, ToolConfirmation.from_response_dict(dict(fr.response or {}))
            except ValueError as exc:  # pydantic's ValidationError, json's JSONDecodeError
                why = " ".join(str(exc).split())
                raise ValueError(f"confirmation {fr.id}: not an answer ADK reads: {why}") from None
    ours = False
    for i, (request, confirmation) in said.items():
        try:
            answered = runtime.answer_permission(session, request, confirmation.confirmed)
        except LookupError:
            continue  # not a prompt of ours: ADK's own
        ours = True
        if answered is Answer.GRANTED:
            continue  # the tool's confirmed run takes the prompt's call
        dispatch.release(session, (request,))  # nothing of ADK's runs the prompt's call
        if answered is Answer.LATE:
            refused = confirmation.model_copy(update={"confirmed": False})
            response = refused.model_dump(by_alias=True, exclude_none=True)
            late = types.FunctionResponse(name=CONFIRM, id=request, response=response)
            parts[i] = types.Part(function_response=late)
    if not ours:
        return message, False
    return message.model_copy(update={"parts": parts}), True
