"""What a wrapper test of any framework reads of a run's events: that no invariant was broken, and
each call's release."""

from __future__ import annotations

from turnwatch import names
from turnwatch.runtime import MemorySink
from turnwatch.testing import check_invariants


def no_violations(sink: MemorySink) -> None:
    assert check_invariants(list(sink)) == []


def outcomes(sink: MemorySink) -> dict[str, str]:
    """Each call's release: its outcome (a discard is an event of its own)."""
    return {
        str(e.call): "discarded"
        if e.kind == names.TOOL_RESULT_DISCARDED
        else str(e.attrs.get("outcome"))
        for e in sink
        if e.kind in (names.TOOL_FINISHED, names.TOOL_RESULT_DISCARDED) and e.call is not None
    }
