"""The scrape-time gauges, from the watchdog's own scan: a gauge and a finding never disagree."""

from __future__ import annotations

from pathlib import Path

from turnwatch.exporters.metrics import LiveState
from turnwatch.runtime.model import FindingKind
from turnwatch.tracing.ledger import Ledger, LedgerError, connect
from turnwatch.watchdog.scan import scan


def live_state(path: Path, ledger: Ledger | None = None) -> LiveState:
    """The gauges now, read from the ledger at ``path`` (``ledger``: the writer, for its losses)."""
    lost = ledger.lost if ledger else 0
    try:
        conn = connect(path, readonly=True)
    except LedgerError:
        return LiveState({}, 0, 0, lost)  # no ledger yet: a scrape must still succeed
    try:
        findings = scan(conn).findings
        inflight = dict(
            conn.execute(
                "SELECT c.policy, count(*) FROM sessions s JOIN calls c "
                "ON c.session = s.session AND c.turn = s.turn WHERE s.processing = 1 "
                "AND c.started_ts IS NOT NULL AND c.ended_ts IS NULL GROUP BY c.policy"
            ).fetchall()
        )
    finally:
        conn.close()
    pinned = {f.session for f in findings if f.kind == FindingKind.PINNED_SESSION}
    aborted_live = {
        (f.session, f.turn) for f in findings if f.kind == FindingKind.ABORTED_WITH_LIVE_PROCESS
    }
    return LiveState(inflight, len(pinned), len(aborted_live), lost)
