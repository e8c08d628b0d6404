"""A session's state arc: a real runtime's session (two prompts, a stop, a late approval), the
same arc read back from a real ledger, and the bound on what is read."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import GRACE, until
from turnwatch import names
from turnwatch.runtime import LocalHost, MemorySink, Runtime
from turnwatch.runtime.events import Event
from turnwatch.tracing.arc import arc_of, read_arc
from turnwatch.tracing.ledger import Ledger, connect


async def test_a_runtime_session_reads_as_its_user_lived_it(tmp_path: Path) -> None:
    sink = MemorySink()
    asks = {"Write"}
    runtime = Runtime(LocalHost(), grace_s=GRACE, sink=sink, ask_permission=lambda t, _c: t in asks)
    first = runtime.start_turn("s")
    one = first.request("Write", {"path": str(tmp_path / "a"), "content": "a"})
    two = first.request("Write", {"path": str(tmp_path / "b"), "content": "b"})
    await until(lambda: len(sink.of(names.PERMISSION_REQUESTED)) == 2, what="two prompts")
    runtime.answer_permission("s", one.call_id, True)  # one prompt still open: still waiting
    await one.result()
    await runtime.abort("s")  # cancels the other; a late approval changes nothing
    runtime.answer_permission("s", two.call_id, True)
    second = runtime.start_turn("s")
    await second.finish()

    arc = arc_of(sink.events)
    assert arc.states == ["ready", "working", "waiting", "working", "ready", "working", "ready"]
    assert [s.event for s in arc.steps] == [
        names.RUNTIME_STARTED,
        names.TURN_STARTED,
        names.PERMISSION_REQUESTED,
        names.PERMISSION_CANCELLED,  # the second answer, the stop's: the first left one open
        names.PROCESSING_CLEARED,
        names.TURN_STARTED,
        names.PROCESSING_CLEARED,
    ]
    assert arc.stops == 1
    assert all(s.inferred is None for s in arc.steps)  # every move recorded

    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    ledger.extend(sink.events)
    ledger.close()
    conn = connect(path, readonly=True)
    assert read_arc(conn, "s") == arc  # the ledger's reading is the stream's
    conn.close()


def test_a_long_session_costs_only_its_newest_events(tmp_path: Path) -> None:
    """Months of turns: the arc is read from the newest ``limit`` events that move it, says it
    was cut, and ends where the whole would."""
    events = [Event(names.RUNTIME_STARTED, "s", 1.0, None, None, None, None, {})]
    for n in range(300):
        t = f"t{n}"
        events.append(Event(names.TURN_STARTED, "s", 2.0 + n, None, t, None, None, {}))
        events.append(Event(names.PROCESSING_CLEARED, "s", 2.5 + n, None, t, None, None, {}))
    events.append(Event(names.TURN_STARTED, "s", 400.0, None, "last", None, None, {}))
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    ledger.extend(events)
    ledger.close()
    conn = connect(path, readonly=True)
    whole, part = read_arc(conn, "s"), read_arc(conn, "s", limit=10)
    conn.close()
    assert (whole.cut, len(whole.steps)) == (False, 602)
    assert part.cut
    assert len(part.steps) <= 10
    assert part.steps == whole.steps[-len(part.steps) :]  # the newest, as the whole has them
    assert arc_of(events).steps == whole.steps
