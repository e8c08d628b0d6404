"""What a stop does to one call: the handler its policy names (ADR), or the rejected modes' own.

A call not started yet is closed before it can start (its prompt cancelled); a started one gets
``tools.abort`` and then, by policy, is raced and discarded (``race``), given a bounded grace
window (``grace``), or awaited (``await``). ``legacy`` reaches only the tools whose listener was
live before the ADR; ``abandon_all`` races everything and leaves prompts open; ``grace_only``
gives every started call the grace window.
"""

from __future__ import annotations

import asyncio

from turnwatch import names
from turnwatch.runtime.calls import Call
from turnwatch.runtime.model import Mode, Outcome, Policy, StopSource
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
            call.close_before_start()
        return
    call.send_abort(src.value)
    policy = Policy.RACE if mode is Mode.ABANDON_ALL else call.policy
    if policy is Policy.RACE and mode is not Mode.GRACE_ONLY:
        call.race()
        return
    loop = asyncio.get_running_loop()
    if policy is Policy.GRACE or mode is Mode.GRACE_ONLY:
        call.handler = loop.create_task(call.grace(grace_s), name=f"grace {call.call_id}")
    else:
        call.handler = loop.create_task(call.await_result(), name=f"await {call.call_id}")


def signal_legacy(turn: Turn, src: StopSource, grace_s: float) -> None:
    """Pre-ADR: only Bash and GenerateImages listened to the signal."""
    for call in list(turn.calls.values()):
        if call.tool in LEGACY_LISTENERS and not call.result.done():
            handle(call, src, Mode.LEGACY, grace_s)
