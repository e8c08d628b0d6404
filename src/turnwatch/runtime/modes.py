"""The stop behaviours the ADR rejected or replaced, kept for comparison (design §1).

Each mode is a :class:`StopRules`, chosen once when the runtime is made (anyio picks its backend
the same way): the stop path itself never asks which mode it is in.

- ``adr``: the plain path (:mod:`turnwatch.runtime.handlers`).
- ``legacy``: before the ADR, only Bash and GenerateImages listened to the signal, and
  ``abort()`` relied on the signal alone: it walks nothing.
- ``abandon_all``: every call is abandoned locally, started or not; a pending prompt stays open,
  and a call approved after the stop still starts.
- ``grace_only``: every started call gets the grace window, then is abandoned.

A stop from the watchdog runs the ADR's walk in every mode: that is how a pinned legacy session
is recovered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from turnwatch.runtime import handlers
from turnwatch.runtime.calls import Call, StopHandler
from turnwatch.runtime.model import Mode, StopSource
from turnwatch.runtime.turn import Turn

#: The tools whose abort listener was live before the ADR (``legacy`` mode).
LEGACY_LISTENERS = frozenset({"Bash", "GenerateImages"})

#: What ``abort()`` does to a turn instead of the walk (``None``: the walk).
Signal = Callable[[Turn, StopSource], None]


@dataclass(frozen=True, slots=True)
class StopRules:
    """What a mode's stop does, chosen once."""

    mode: Mode
    #: What a stop does to one call (the walk's, a typed abort's, the signal's).
    handle: StopHandler
    #: What ``abort()`` does instead of the walk (``legacy``: the signal alone).
    signal: Signal | None = None
    #: Whether a call waiting to start watches its stop (``abandon_all`` does not).
    heeds_prestart_stop: bool = True
    #: Whether a read-only call may run in its requester's task (the race cancels it there).
    runs_in_place: bool = False


def _signal_legacy(turn: Turn, src: StopSource) -> None:
    """Pre-ADR: only Bash and GenerateImages listened to the signal."""
    for call in list(turn.calls.values()):
        if call.tool in LEGACY_LISTENERS and not call.result.done():
            handlers.handle(call, src)


def _abandon_all(call: Call, src: StopSource) -> None:
    """The rejected alternative: forget every call locally; leave its prompt open."""
    if not call.reach(src):
        return
    if not call.phase.started:
        call.discard()  # its prompt left open: the flaw this mode shows
        return
    call.send_abort(src)
    call.race()


def _grace_only(call: Call, src: StopSource) -> None:
    """The rejected alternative: every started call waits one grace window."""
    if handlers.reach_started(call, src):
        handlers.start_grace(call)


ADR = StopRules(Mode.ADR, handlers.handle, runs_in_place=True)

RULES: Mapping[Mode, StopRules] = {
    Mode.ADR: ADR,
    Mode.LEGACY: StopRules(Mode.LEGACY, handlers.handle, signal=_signal_legacy),
    Mode.ABANDON_ALL: StopRules(Mode.ABANDON_ALL, _abandon_all, heeds_prestart_stop=False),
    Mode.GRACE_ONLY: StopRules(Mode.GRACE_ONLY, _grace_only),
}
