"""Each process call's own cgroup, when one cannot be made, and when its path is taken.

A limit of the hierarchy (``cgroup.max.descendants`` here, a delegated scope's in the field)
refuses a call's cgroup. Insisted on (``containment="cgroup"``), that fails the call before
anything starts: it ran in its process group, with that mode's holes, and said so only in
``tool.started``. In ``auto`` mode it does run there, and says so.
"""

from __future__ import annotations

import contextlib
import functools
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import GRACE, Procs, require_cgroups, wait_until
from tests.runtime.test_containment import host_for, output_of
from tests.runtime.test_spawn_faults import marked
from turnwatch import names
from turnwatch.runtime import LocalHost, MemorySink, Outcome, Runtime
from turnwatch.runtime import cgroup as cgroups
from turnwatch.testing import check_invariants


@contextlib.contextmanager
def no_more_cgroups(root: Path) -> Iterator[None]:
    """No cgroup more under ``root`` (the host's parent, shared by this process's hosts)."""
    taken = sum(1 for p in root.iterdir() if p.is_dir())
    (root / "cgroup.max.descendants").write_text(f"{taken}\n")
    try:
        yield
    finally:
        (root / "cgroup.max.descendants").write_text("max\n")


def root_of(host: LocalHost) -> Path:
    assert host.containers.root is not None
    return host.containers.root.path


async def test_a_call_that_cannot_have_the_cgroup_insisted_on_fails_before_it_starts(
    sink: MemorySink, tmp_path: Path
) -> None:
    host = host_for("cgroup")
    runtime = Runtime(host, grace_s=GRACE, sink=sink)
    turn = runtime.start_turn("s")
    flag = tmp_path / "ran"
    with no_more_cgroups(root_of(host)):
        call = turn.request("Bash", {"command": f"touch {flag}"})
        result = await call.result()

    assert result.outcome is Outcome.FAILED
    assert result.error is not None
    assert "could not make the call's cgroup" in result.error
    assert not sink.of(names.TOOL_STARTED, call=call.call_id)
    assert not flag.exists()
    assert marked(f"s/{call.call_id}") == []
    await turn.finish()
    assert check_invariants(sink.events) == []


async def test_in_auto_mode_a_call_without_its_cgroup_runs_in_its_group_and_says_so(
    sink: MemorySink,
) -> None:
    require_cgroups()
    auto = LocalHost(containment="auto")
    assert auto.containment == "cgroup"
    runtime = Runtime(auto, grace_s=GRACE, sink=sink)
    turn = runtime.start_turn("s")
    with no_more_cgroups(root_of(auto)):
        result = await turn.request("Bash", {"command": "echo ran"}).result()

    assert result.outcome is Outcome.COMPLETED
    (started,) = sink.of(names.TOOL_STARTED)
    assert started.attrs["containment"] == "process_group"
    assert "cgroup" not in started.attrs
    assert started.attrs["holes"]
    await turn.finish()


@pytest.fixture
def taken_numbers() -> Iterator[list[Path]]:
    """The next call cgroups' paths made already, each with a process in it: what a runtime
    that had this pid before left (pids are reused), under this process's parent."""
    host = host_for("cgroup")
    root = root_of(host)
    following = next(cgroups._SEQ) + 1  # noqa: SLF001 - the numbers the next calls would take
    made: list[Path] = []
    sleepers: list[subprocess.Popen[bytes]] = []
    for n in range(following, following + 3):
        path = root / f"call-{n}"
        path.mkdir()
        made.append(path)
        cg = cgroups.CallCgroup.at(path)
        assert cg is not None
        sleeper = subprocess.Popen(cg.wrap(["sleep", "1000"]))
        sleepers.append(sleeper)
        wait_until(functools.partial(cg.holds, sleeper.pid), what="a process in it")
    try:
        yield made
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
        for path in made:
            wait_until(functools.partial(_empty, path), what="it to empty")
            path.rmdir()


def _empty(path: Path) -> bool:
    return not cgroups.populated(path)


async def test_a_call_cgroup_left_at_the_next_number_is_passed_by(
    sink: MemorySink, procs: Procs, taken_numbers: list[Path]
) -> None:
    runtime = Runtime(host_for("cgroup"), grace_s=GRACE, sink=sink)
    turn = runtime.start_turn("s")
    call = turn.request("Bash", {"command": "echo ran"})
    result = await call.result()

    assert result.outcome is Outcome.COMPLETED, result.error
    assert output_of(sink, call.call_id) == "ran\n"
    (started,) = sink.of(names.TOOL_STARTED)
    assert started.attrs["containment"] == "cgroup"
    assert Path(started.attrs["cgroup"]) not in taken_numbers
    for path in taken_numbers:
        assert cgroups.populated(path), "another runtime's cgroup is left as it was"
    await turn.finish()
