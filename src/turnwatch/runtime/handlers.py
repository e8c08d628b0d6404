"""What the ADR's stop does to one call: the handler its policy names.

A call not started yet is closed before it can start (its prompt cancelled); a started one gets
``tools.abort`` and then, by policy, is raced and discarded (``race``), given a bounded grace
window (``grace``), or awaited (``await``). This is the plain path: the rejected modes' own
handlers live in :mod:`turnwatch.runtime.modes`, chosen once, when the runtime is made.
"""

from __future__ import annotations

import asyncio

from turnwatch import names
from turnwatch.runtime.calls import Call
from turnwatch.runtime.model import Outcome, Policy, StopSource
from turnwatch.runtime.protocol import HostResult


def reach_started(call: Call, src: StopSource) -> bool:
    """A stop's first steps in every mode that heeds a stop before the start: a call not
    started is closed; a started one is sent ``tools.abort``. True when a policy's handler must
    follow (False: nothing left to do, or already done by an earlier stop)."""
    if not call.reach(src):
        return False
    if not call.phase.started:
        call.close()
        return False
    call.send_abort(src)
    return True


def handle(call: Call, src: StopSource) -> None:
    """Run ``call``'s stop handler; idempotent: the walk and the signal may both run it."""
    if not reach_started(call, src):
        return
    if call.policy is Policy.RACE:
        call.race()
    elif call.policy is Policy.GRACE:
        start_grace(call)
    else:
        start_await(call)


def start_grace(call: Call) -> None:
    """The ``grace`` handler for a call sent ``tools.abort``, in a task the call holds."""
    task = grace(call, call.exec_task, call.env.grace_s)
    call.watch(asyncio.get_running_loop().create_task(task, name=f"grace {call.call_id}"))


def start_await(call: Call) -> None:
    """The ``await`` handler for a call sent ``tools.abort``, in a task the call holds."""
    task = await_result(call, call.exec_task)
    call.watch(asyncio.get_running_loop().create_task(task, name=f"await {call.call_id}"))


async def grace(call: Call, task: asyncio.Task[HostResult | None] | None, window: float) -> None:
    """``grace``: wait at most ``window`` for the host's collected output (``task``, the
    call's execution as the stop found it: the call lets go of it once it is done), then give
    up."""
    assert task is not None
    if await call.env.clock.wait(task, window):
        call.host_answered(task)
        return
    call.abandon()
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
