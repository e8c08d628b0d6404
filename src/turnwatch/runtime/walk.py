"""What a stop does to one call: the handler its policy names (ADR), or the rejected modes' own.

A call not started yet is closed before it can start (its prompt cancelled); a started one gets
``tools.abort`` and then, by policy, is raced and discarded (``race``), given a bounded grace
window (``grace``), or awaited (``await``). ``legacy`` reaches only the tools whose listener was
live before the ADR; ``abandon_all`` races everything and leaves prompts open; ``grace_only``
gives every started call the grace window.
"""

from __future__ import annotations

import asyncio
import time

from turnwatch import names
from turnwatch.runtime.calls import Call
from turnwatch.runtime.clock import REAL
from turnwatch.runtime.model import Mode, Outcome, Policy, StopSource, ToolClass
from turnwatch.runtime.protocol import AbortRequest, HostResult
from turnwatch.runtime.session import Turn

#: The tools whose abort listener was live before the ADR (``legacy`` mode).
LEGACY_LISTENERS = frozenset({"Bash", "GenerateImages"})


def handle(call: Call, src: StopSource, mode: Mode, grace_s: float) -> None:
    """Run ``call``'s stop handler; idempotent: the walk and the signal may both run it."""
    if not call.stop.done():
        call.stop.set_result(src.value)
    if call.result.done() or call.abort_sent:
        return
    if not call.phase.started:
        if mode is Mode.ABANDON_ALL:
            # The rejected alternative: forget the call locally, leave its prompt open.
            call.abandoned = True
            call.finish(Outcome.DISCARDED, output="", error_code=names.TOOL_ABORTED)
        else:
            close_before_start(call)
        return
    send_abort(call, src.value)
    policy = Policy.RACE if mode is Mode.ABANDON_ALL else call.policy
    if policy is Policy.RACE and mode is not Mode.GRACE_ONLY:
        race(call)
        return
    loop = asyncio.get_running_loop()
    task = call.exec_task  # held by the handler: the call lets go of it once it is done
    if policy is Policy.GRACE or mode is Mode.GRACE_ONLY:
        call.handler = loop.create_task(grace(call, task, grace_s), name=f"grace {call.call_id}")
    else:
        call.handler = loop.create_task(await_result(call, task), name=f"await {call.call_id}")


def signal_legacy(turn: Turn, src: StopSource, grace_s: float) -> None:
    """Pre-ADR: only Bash and GenerateImages listened to the signal."""
    for call in list(turn.calls.values()):
        if call.tool in LEGACY_LISTENERS and not call.result.done():
            handle(call, src, Mode.LEGACY, grace_s)


# --- the handlers each policy selects ---


def close_before_start(call: Call) -> None:
    """A stop before the call started: it never starts, and its prompt can never be approved."""
    if call.prompt is not None and call.prompt.close():
        call.emit(names.PERMISSION_CANCELLED)
    call.finish(Outcome.ABORTED, error_code=names.TOOL_ABORTED, before_start=True)


def send_abort(call: Call, source: str) -> None:
    """Send the typed ``tools.abort`` for this call to the host."""
    call.abort_sent = True
    if call.env.sink is not None:  # no sink: not even the attributes are built
        call.emit(
            names.TOOLS_ABORT_SENT,
            policy=call.policy_name,
            **{names.K_CLASS: call.class_name},
            source=source,
        )
    if call.local:
        return  # its execution is ours: race() cancels it, await waits for it
    call.env.host.abort(
        AbortRequest(
            call.session,
            call.turn.id,
            call.call_id,
            call.tool,
            source,
            call.env.grace_s,
            call.turn.traceparent,
            # On real time only: a test's manual clock is not the host's unless it says so.
            time.monotonic() + call.env.grace_s if call.env.clock is REAL else None,
        )
    )


def race(call: Call) -> None:
    """``race``: the wait ends now; the host discards the result."""
    call.abandoned = True
    call.finish(
        Outcome.DISCARDED, output="", error_code=names.TOOL_ABORTED, policy=Policy.RACE.value
    )
    # What the host does to a raced call's execution (cancels a read-only one; another
    # class, raced only by a rejected mode, runs on): here the runtime is its host.
    if call.in_place is not None:
        call.race_cancelled = True
        call.in_place.cancel()
    elif call.local and call.exec_task is not None and call.tool_class is ToolClass.READ_ONLY:
        call.exec_task.cancel()


async def grace(call: Call, task: asyncio.Task[HostResult | None] | None, window: float) -> None:
    """``grace``: wait at most ``window`` for the host's collected output (``task``, the
    call's execution as the stop found it), then give up."""
    assert task is not None
    if await call.env.clock.wait(task, window):
        call.host_answered(task)
        return
    call.abandoned = True
    call.emit(names.TOOL_GRACE_EXPIRED, grace_s=window)
    call.finish(
        Outcome.ABORTED,
        error_code=names.TOOL_ABORTED,
        policy=Policy.GRACE.value,
        grace_expired=True,
    )


async def await_result(call: Call, task: asyncio.Task[HostResult | None] | None) -> None:
    """``await``: the result (``task``'s) arrives, however late; the turn waits for it."""
    assert task is not None
    await asyncio.wait((task,))
    call.host_answered(task)
