"""Approvals in a wrapped LangGraph run: ``HumanInTheLoopMiddleware``'s interrupt as the turn's
pending permissions. Requires the ``langgraph`` extra.

A run that ``interrupt()``s for approval returns with the interrupt pending; the turn does not
settle (a permission can still be approved): each tool call the interrupt asks about is a call
of the turn with its prompt open (``permission.requested``). The resume, ``Command(resume=
{"decisions": […]})`` given to the same :class:`~turnwatch.integrations.langgraph.StoppableGraph`
with the same session, answers them through the runtime (approve and edit: granted; reject and
respond: denied) and the turn goes on. A stop while they wait cancels them and settles the turn;
an approval that comes after it is refused (``permission.late``), turned into a rejection, so
the tool never runs and its call is answered "not run" in the thread's history.

Both of the middleware's modes: ``batched`` (one interrupt for a model turn's calls, its
``action_requests`` in the order of the model's calls) and ``per_call`` (one interrupt per call,
its ``tool_call_id`` given). A tool that calls ``interrupt()`` itself is paused the same way:
its resumption is the permission (:func:`resumptions`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.types import Command

from turnwatch.integrations.wrappers import Dispatcher, resumed_id
from turnwatch.runtime.gate import Answer
from turnwatch.runtime.model import ToolClass
from turnwatch.runtime.runtime import Runtime
from turnwatch.runtime.turn import Turn

#: ``asked_calls``' mark of a paused tool's resumption (no interrupt id of its own to key by).
RESUME = "resume"
#: What the model is told of a call whose approval came after the stop.
STOPPED = "Not run: the user stopped the turn before this call was approved."
_GRANTS = frozenset({"approve", "edit"})


@dataclass
class Awaiting:
    """A turn left waiting on approvals: the calls asked about, in the interrupt's order, and
    (per-call mode) which interrupt asks about which call."""

    #: None once a stop settled it before a run resumed it: what is kept for a late resume.
    turn: Turn | None
    calls: list[str]
    by_interrupt: dict[str, str]
    #: Of ``calls``, the resumptions of tools their own ``interrupt()`` paused.
    resumes: list[str] = field(default_factory=list)


def asked_calls(
    interrupts: Sequence[Any], messages: Sequence[Any]
) -> list[tuple[str | None, dict[str, Any]]]:
    """The tool calls the pending ``interrupts`` ask to approve, in their order, each with the
    id of its own interrupt (per-call mode; None in a batch): a batched request's actions
    matched to the last model message's calls (by name and arguments, in order), a per-call
    request's by its call id. Interrupts of other kinds ask nothing of a call."""
    last = next((m for m in reversed(messages) if isinstance(m, AIMessage) and m.tool_calls), None)
    left = [dict(c) for c in (last.tool_calls if last is not None else [])]
    out: list[tuple[str | None, dict[str, Any]]] = []
    for intr in interrupts:
        value = getattr(intr, "value", None)
        if not isinstance(value, dict):
            continue
        if value.get("type") == "tool_approval":
            own = getattr(intr, "id", None)
            asks = [(own, c) for c in left if c["id"] == value.get("tool_call_id")]
        else:
            asks = []
            for req in value.get("action_requests") or ():
                said = (req.get("name"), req.get("args")) if isinstance(req, dict) else None
                found = next((c for c in left if (c["name"], c["args"]) == said), None)
                if found is not None:
                    asks.append((None, found))
        for pair in asks:
            left.remove(pair[1])
            out.append(pair)
    return out


def resumptions(dispatch: Dispatcher, session: str) -> list[tuple[str | None, dict[str, Any]]]:
    """The tool calls of ``session`` their own ``interrupt()`` paused, as calls to ask about:
    each one's resumption, under its own id (the framework runs the tool again from its
    start, and ``interrupt()`` then returns the user's answer)."""
    out: list[tuple[str | None, dict[str, Any]]] = []
    for (sess, cid), (name, args) in list(dispatch.paused.items()):
        if sess != session:
            continue
        del dispatch.paused[(sess, cid)]
        dispatch.renamed[(sess, cid)] = resumed_id(cid)
        out.append((RESUME, {"id": resumed_id(cid), "name": name, "args": dict(args)}))
    return out


def ask(
    turn: Turn, dispatch: Dispatcher, asked: Sequence[tuple[str | None, dict[str, Any]]]
) -> Awaiting:
    """Each call asked about, a call of ``turn`` with its prompt open (so an answer given at
    once finds it)."""
    waiting = Awaiting(turn, [], {})
    for interrupt, c in asked:
        cid = str(c["id"])
        slot = dispatch.slot(turn.session.id, cid)
        cls = dispatch.classes.get(c["name"], ToolClass.MUTATING)
        slot.handle = turn.request(
            c["name"], c.get("args") or {}, call_id=cid, tool_class=cls.value, ask_permission=True
        )
        waiting.calls.append(cid)
        if interrupt == RESUME:
            waiting.resumes.append(cid)
        elif interrupt is not None:
            waiting.by_interrupt[interrupt] = cid
    return waiting


def let_go(dispatch: Dispatcher, session: str, waiting: Awaiting) -> None:
    """A stop settled ``waiting``'s turn before a run resumed it: nothing will run its calls,
    so their slots go, with the ids their resumptions would have run under; a late resume is
    refused from ``waiting``'s calls alone (:func:`answer`)."""
    waiting.turn = None
    dispatch.release(session, waiting.calls)
    for key in [k for k, v in dispatch.renamed.items() if k[0] == session and v in waiting.resumes]:
        del dispatch.renamed[key]


def answer(
    runtime: Runtime, dispatch: Dispatcher, session: str, waiting: Awaiting, resume: Command[Any]
) -> Command[Any] | None:
    """The user's decisions through the runtime, in the interrupt's order; one that came after
    the stop is refused there and sent on as a rejection (the tool never runs). A paused
    tool's answer (any value: the tool reads it) grants its resumption; one after the stop is
    refused, and None says so: the tool must not go on."""
    if waiting.resumes:
        said = [runtime.answer_permission(session, c, True) for c in waiting.resumes]
        if any(a is not Answer.GRANTED for a in said):
            for c in waiting.resumes:
                dispatch.slots.pop((session, c), None)
            for key in [k for k, v in dispatch.renamed.items() if v in waiting.resumes]:
                del dispatch.renamed[key]
            return None
        return resume
    value = resume.resume
    if isinstance(value, dict) and isinstance(value.get("decisions"), list):  # a batch's
        decisions = list(value["decisions"])
        for i, cid in enumerate(waiting.calls[: len(decisions)]):
            decisions[i] = _decide(runtime, dispatch, session, cid, decisions[i])
        return Command(resume={**value, "decisions": decisions})
    if isinstance(value, dict) and "type" in value and len(waiting.calls) == 1:  # one call's
        return Command(resume=_decide(runtime, dispatch, session, waiting.calls[0], value))
    if isinstance(value, dict) and value and set(value) <= set(waiting.by_interrupt):
        return Command(  # per call, keyed by interrupt
            resume={
                k: _decide(runtime, dispatch, session, waiting.by_interrupt[k], d)
                for k, d in value.items()
            }
        )
    return resume  # not an answer turnwatch can read: LangGraph's own


def _decide(runtime: Runtime, dispatch: Dispatcher, session: str, call: str, decision: Any) -> Any:
    approved = isinstance(decision, dict) and decision.get("type") in _GRANTS
    try:
        said = runtime.answer_permission(session, call, approved)
    except LookupError:
        return decision  # not a prompt of ours
    if said is not Answer.GRANTED:  # the framework will not run it: nothing to hand over
        dispatch.slots.pop((session, call), None)
    if said is Answer.LATE:
        return {"type": "reject", "message": STOPPED}
    return decision
