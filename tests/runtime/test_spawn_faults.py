"""A process call whose spawn goes wrong starts nothing that lasts and leaves nothing behind.

Between its cgroup being made and its process being held (a pidfd), a call could fail: the
spawn itself (a ``cwd`` that does not exist), or the pidfd (a kernel before 5.3, a seccomp
filter that refuses ``pidfd_open``, the process out of file descriptors). Each left something
for the life of the host: an empty ``call-N`` cgroup per failed spawn, or a running process
no stop could reach.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

import psutil
import pytest

from tests.conftest import GRACE
from tests.runtime.test_containment import MODES, host_for
from turnwatch.runtime import MemorySink, Outcome, Runtime
from turnwatch.runtime.tools import proctree
from turnwatch.testing import check_invariants


def marked(marker: str) -> list[psutil.Process]:
    """This process's live descendants that a host started for the call marked ``marker``."""
    out = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if (
                child.environ().get(proctree.CALL_MARKER) == marker
                and child.status() != psutil.STATUS_ZOMBIE
            ):
                out.append(child)
    return out


def call_cgroups(runtime: Runtime) -> set[str]:
    """The call cgroups under the host's root (every host of this process shares it)."""
    root = runtime.host.containers.root  # type: ignore[attr-defined]
    return {p.name for p in Path(root.path).iterdir() if p.is_dir()} if root else set()


#: How ``pidfd_open`` refuses, and what the call's error then says.
REFUSALS = {
    # A kernel before 5.3 (a seccomp filter says EPERM): what the machine lacks.
    "no_pidfd_open": (
        errno.ENOSYS,
        "Function not implemented), so it was killed: process tools need Linux 5.3 or later, "
        "with pidfd_open allowed",
    ),
    # The process out of descriptors: that, and no word of kernels.
    "out_of_fds": (errno.EMFILE, "Too many open files), so it was killed"),
}


@pytest.mark.parametrize("refusal", list(REFUSALS))
@pytest.mark.parametrize("mode", MODES)
async def test_a_call_whose_process_cannot_be_held_ends_it_and_says_why(
    mode: str, refusal: str, sink: MemorySink, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only ``pidfd_open``'s refusal is simulated; the spawn and the kill are real."""
    code, says = REFUSALS[refusal]

    def refused(pid: int, flags: int = 0) -> int:
        raise OSError(code, os.strerror(code))

    runtime = Runtime(host_for(mode), grace_s=GRACE, sink=sink)
    turn = runtime.start_turn("s")
    before = call_cgroups(runtime)
    monkeypatch.setattr(os, "pidfd_open", refused)
    call = turn.request("Bash", {"command": "exec sleep 1000"})
    result = await call.result()
    monkeypatch.undo()

    assert result.outcome is Outcome.FAILED
    assert result.error is not None
    assert result.error.startswith("could not hold the call's process (pidfd_open: ")
    assert result.error.endswith(says)
    assert marked(f"s/{call.call_id}") == [], "the process it could not hold still runs"
    assert not proctree.SPAWNED
    assert call_cgroups(runtime) - before == set()  # none left (an earlier test's may go)
    await turn.finish()
    assert check_invariants(sink.events) == []


async def test_calls_that_cannot_spawn_leave_no_cgroup(sink: MemorySink, tmp_path: Path) -> None:
    runtime = Runtime(host_for("cgroup"), grace_s=GRACE, sink=sink)
    turn = runtime.start_turn("s")
    before = call_cgroups(runtime)
    for _ in range(3):
        result = await turn.request(
            "Bash", {"command": "true", "cwd": str(tmp_path / "no")}
        ).result()
        assert result.outcome is Outcome.FAILED
    assert call_cgroups(runtime) - before == set()  # none left (an earlier test's may go)
    await turn.finish()
    assert check_invariants(sink.events) == []
