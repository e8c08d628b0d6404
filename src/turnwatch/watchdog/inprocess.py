"""What pins the sessions of the runtime the watchdog runs beside, read from that runtime's own
state: found (and then recovered with ``abort()`` in process) whether or not the ledger is being
written. The ledger's scan finds the same sessions when it is; a session both find is one
finding, the ledger's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from turnwatch.runtime.model import FindingKind
from turnwatch.watchdog.scan import Action, Config, Finding

if TYPE_CHECKING:
    from turnwatch.runtime.runtime import Runtime

__all__ = ["merged", "runtime_findings"]

_WALKED = (FindingKind.PINNED_SESSION, FindingKind.ABORT_RPC_STUCK)


def runtime_findings(runtime: Runtime, cfg: Config) -> list[Finding]:
    """Sessions of ``runtime`` whose stop has not settled after ``cfg.rpc_stuck_s``, or whose
    "processing" is still set ``cfg.clear_lag_s`` after their turn settled. Read on the event
    loop's thread (the runtime's state is the loop's)."""
    mono, wall = time.monotonic(), time.time()
    out: list[Finding] = []
    for sess in runtime.sessions.values():
        turn = sess.live
        if turn is not None and turn.stop_started is not None:
            age = mono - turn.stop_started
            if age <= cfg.rpc_stuck_s:
                continue
            why = f"its stop has not settled after {age:.0f} s (the runtime's own state)"
        elif turn is None and sess.processing and (last := sess.last) is not None:
            if last.settled_at is None or (age := mono - last.settled_at) <= cfg.clear_lag_s:
                continue
            turn = last
            why = (
                f"its turn settled {age:.0f} s ago but processing was never cleared "
                "(the runtime's own state)"
            )
        else:
            continue
        out.append(
            Finding(
                FindingKind.PINNED_SESSION,
                sess.id,
                turn.id,
                since=wall - age,
                detail=why,
                action=Action.ABORT_WALK,
            )
        )
    return out


def merged(found: list[Finding], own: list[Finding]) -> list[Finding]:
    """The ledger's findings, and the runtime's about sessions the ledger did not find pinned."""
    walked = {f.session for f in found if f.kind in _WALKED}
    return [*found, *(f for f in own if f.session not in walked)]
