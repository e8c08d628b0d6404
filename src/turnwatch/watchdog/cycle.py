"""One pass of the watchdog's loop: what it found, and what was done about it."""

from __future__ import annotations

from dataclasses import dataclass, field

from turnwatch.runtime.model import FindingKind, RecoveryResult
from turnwatch.watchdog.recover import Recovery
from turnwatch.watchdog.scan import Finding


@dataclass
class Cycle:
    """One pass of the loop."""

    findings: list[Finding] = field(default_factory=list)
    actions: list[Recovery] = field(default_factory=list)
    duration_s: float = 0.0
    #: Why the ledger could not be read in this pass (the findings are then only what the
    #: runtime itself knows), or None.
    unread: str | None = None
    #: Rows of processing sessions this pass skipped as damaged: sessions it could not judge.
    damaged: list[str] = field(default_factory=list)

    @property
    def unresolved(self) -> list[Finding]:
        """Findings no action resolved (exit 1 for ``watch --once``)."""
        done = {
            id(a.finding)
            for a in self.actions
            if a.result in (RecoveryResult.OK, RecoveryResult.SKIPPED)
        }
        # A background process runs by design: reported, never a reason to page anyone.
        return [
            f
            for f in self.findings
            if id(f) not in done and f.kind != FindingKind.BACKGROUND_PROCESS
        ]
