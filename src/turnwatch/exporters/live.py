"""Live gauges of a runtime in this process (for embedders who serve metrics without a ledger)."""

from __future__ import annotations

import time
from collections import Counter

from turnwatch.exporters.metrics import LiveState
from turnwatch.runtime.runtime import Runtime

#: A stop whose settlement is still pending after this long counts as pinned.
PINNED_AFTER_S = 15.0


def runtime_state(runtime: Runtime, *, pinned_after_s: float = PINNED_AFTER_S) -> LiveState:
    """In-flight calls by policy and pinned sessions, read from the runtime's own state."""
    inflight: Counter[str] = Counter()
    pinned = 0
    now = time.monotonic()
    for sess in runtime.sessions.values():
        turn = sess.live
        if turn is None:
            continue
        for call in turn.calls.values():
            if call.phase.started and not call.result.done():
                inflight[call.policy_name] += 1
        if turn.stop_started is not None and now - turn.stop_started > pinned_after_s:
            pinned += 1
    return LiveState(dict(inflight), pinned, 0)
