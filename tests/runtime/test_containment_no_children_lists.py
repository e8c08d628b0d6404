"""Process-group containment on a kernel without ``/proc/PID/task/TID/children``.

Those lists come with ``CONFIG_PROC_CHILDREN`` (checkpoint/restore); a kernel built without it,
or a sandbox's own ``/proc`` (gVisor), has none, and the host then finds a call's processes by a
scan of ``/proc``. Only the lists' absence is simulated (this kernel has them); the processes, the
signals and the stop are real. Every look at a call's tree must see the whole tree there too: a
look that read the missing lists saw the root and no descendant.
"""

from __future__ import annotations

import pytest

from tests.conftest import Procs, until
from tests.runtime.test_containment import (
    ROWS,
    SLACK_S,
    pids_in,
    printed_pids,
    runtime_in,
)
from turnwatch import names
from turnwatch.runtime import MemorySink, Outcome
from turnwatch.runtime.tools import proctree
from turnwatch.testing import check_invariants


@pytest.fixture(autouse=True)
def no_children_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """As such a kernel: no lists, and a read of one finds nothing (the files are not there)."""
    monkeypatch.setattr(proctree, "children_files", lambda: False)
    monkeypatch.setattr(proctree, "child_pids", lambda pid, tids=None: [])


async def test_what_a_finished_call_left_is_ended_whole_by_the_stop(
    sink: MemorySink, procs: Procs
) -> None:
    """A call's shell exits leaving a subshell with a child of its own (a server and its
    worker): the stop ends both, not only the one re-parented to the host."""
    runtime = runtime_in("process_group", sink)
    turn = runtime.start_turn("s")
    script = "(trap '' TERM; sleep 1000 & echo pid=$!; echo pid=$$; wait) >/dev/null & echo pid=$!"
    left = turn.request("Bash", {"command": script})
    result = await left.result()
    assert result.outcome is Outcome.COMPLETED
    [subshell] = (procs.track(pid) for pid in pids_in(result.output))
    await until(lambda: len(subshell.children()) == 1, what="the subshell's child")
    worker = procs.track(subshell.children()[0].pid)
    lingering = sink.of(names.TOOL_FINISHED, call=left.call_id)[0].attrs["lingering"]
    assert sorted(pid for pid, _start, _ticks in lingering) == [subshell.pid, worker.pid]
    busy = turn.request("Bash", {"command": "echo ready; exec sleep 1000"})
    await until(lambda: sink.of(names.TOOL_PROGRESS, call=busy.call_id), what="a second call")

    await runtime.abort("s")

    await until(lambda: procs.alive() == [], timeout=SLACK_S, what="the subshell and its worker")
    reaped = sink.of(names.PROCESS_REAPED, call=left.call_id)[0].attrs["pids"]
    assert sorted(reaped) == [subshell.pid, worker.pid]
    assert check_invariants(sink.events) == []


@pytest.mark.parametrize("row", ["setsid_child", "daemon_closes_every_fd", "nohup_disown"])
async def test_nothing_of_a_stopped_call_outlives_its_grace_window(
    row: str, sink: MemorySink, procs: Procs
) -> None:
    script, expected = ROWS[row]
    runtime = runtime_in("process_group", sink)
    turn = runtime.start_turn("s")
    call = turn.request("Bash", {"command": script})
    for pid in await printed_pids(sink, call.call_id, expected):
        procs.track(pid)
    procs.track(sink.of(names.TOOL_STARTED, call=call.call_id)[0].attrs["pid"])

    await runtime.abort("s")

    assert (await call.result()).outcome is Outcome.ABORTED
    await until(lambda: procs.alive() == [], timeout=SLACK_S, what="every escapee dead")
    assert check_invariants(sink.events) == []
