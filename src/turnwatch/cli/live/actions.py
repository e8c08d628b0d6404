"""What the live page offers a session, and why not: Stop (through a control endpoint, or the
demo's own runtimes) and Recover (the CLI's recovery, its plan shown before it acts).

A button that cannot work is not offered: a session whose runtime recorded no control endpoint
(an agent CLI's, an ingested one) says why instead, and Recover is offered only where recovery
would act: :func:`turnwatch.watchdog.holds.what_holds` decides, as it does for ``explain`` and
``recover``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from turnwatch.tracing.ledger import connect
from turnwatch.tracing.view import SessionView
from turnwatch.watchdog.holds import recover_command, what_holds
from turnwatch.watchdog.scan import Config

#: Why a session's Stop cannot work here (None: it can).
CanStop = Callable[[SessionView], str | None]
#: ``recover(session, confirm)``: the plan (``confirm`` False: nothing is done or written), or
#: what was done; a JSON-able answer with ``actions`` and ``verdict``.
Recover = Callable[[str, bool], dict[str, Any]]

AGENT_CLI = "stop it in its CLI (Esc): turnwatch reads its session file, it has no endpoint"
NO_CONTROL = "its runtime recorded no control endpoint to stop it by"


def by_control(r: SessionView) -> str | None:
    """Stop through the session's control endpoint: only where the ledger records one."""
    if r.control:
        return None
    return AGENT_CLI if r.source else NO_CONTROL


def recover_by_watchdog(ledger: Path, grace_s: float) -> Recover:
    """The recovery ``turnwatch recover`` does, for the page: the plan first, then, confirmed,
    the same actions (recorded in the ledger, as the CLI's are)."""
    from turnwatch.cli.watchdog_program import make_watchdog

    cfg = Config(grace_s=grace_s)

    def recover(session: str, confirm: bool) -> dict[str, Any]:
        dog, close = make_watchdog(
            ledger, cfg, recover=True, dry_run=False, write=confirm, say=lambda _m: None
        )
        try:
            conn = connect(ledger, readonly=True)
            try:
                hold = what_holds(conn, session, cfg=cfg, findings=dog.scan().findings)
            finally:
                conn.close()
            answer: dict[str, Any] = {
                "session": session,
                "done": False,
                "actions": [],
                "verdict": hold.verdict(),
                "reasons": hold.reasons(time.time(), cfg),
                "command": recover_command(session, "--ledger", str(ledger)),
            }
            if not hold.recoverable:
                return answer
            acts = asyncio.run(dog.act(hold.findings, dry_run=not confirm))
            answer["done"] = confirm
            answer["actions"] = [
                {
                    "finding": str(a.finding.kind),
                    "action": a.said,
                    "result": str(a.result),
                    "detail": a.detail,
                }
                for a in acts
            ]
            return answer
        finally:
            close()

    return recover
