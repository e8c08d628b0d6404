"""Containment: stop → last member dead, cgroup against process group; a cgroup's cost per call.

Both modes run side by side in one run on the same trees: a Bash that honours SIGTERM, alone and
with 50 background children. "Last member dead" is measured from outside the runtime: a pidfd per
member, opened before the stop, all readable.
"""

from __future__ import annotations

import asyncio
import subprocess
import time

import psutil

from benchmarks.common import fmt_s, median, pct, table
from turnwatch import names
from turnwatch.runtime import LocalHost, MemorySink, Runtime
from turnwatch.runtime.cgroup import CgroupRoot
from turnwatch.runtime.terminate import Pidfds

RUNS = 15
COST_RUNS = 300
TREES = {
    "1 process": ("echo ready; exec sleep 1000", 1),
    "50-process tree": ("for i in $(seq 50); do sleep 1000 & done; echo ready; wait", 51),
}


def _members(leader: int) -> dict[int, float]:
    """The leader and its descendants (every member of these trees stays a descendant)."""
    root = psutil.Process(leader)
    out = {leader: root.create_time()}
    for child in root.children(recursive=True):
        out[child.pid] = child.create_time()
    return out


async def _stop_to_dead(mode: str, script: str, size: int) -> list[float]:
    sink = MemorySink()
    host = LocalHost(containment=mode)
    rt = Runtime(host, grace_s=5.0, sink=sink)
    out: list[float] = []
    for i in range(RUNS):
        turn = rt.start_turn("bench", f"t{i}")
        call = turn.request("Bash", {"command": script})
        await sink.wait_for(names.TOOL_PROGRESS, call=call.call_id)
        leader = sink.of(names.TOOL_STARTED, call=call.call_id)[0].attrs["pid"]
        members = _members(leader)
        while len(members) < size:  # the last children may still be forking
            await asyncio.sleep(0.002)
            members = _members(leader)
        watch = Pidfds(members)
        t0 = time.perf_counter()
        stop = asyncio.ensure_future(rt.abort("bench"))
        gone = await watch.wait_gone(10.0)
        out.append(time.perf_counter() - t0)
        await stop
        watch.close()
        assert gone, "a member outlived the stop"
    await host.close()
    return out


def _cgroup_costs() -> dict[str, float]:
    root = CgroupRoot.probe()
    assert root is not None
    made: list[float] = []
    for _ in range(COST_RUNS):
        t0 = time.perf_counter()
        cg = root.new()
        assert cg is not None
        cg.remove()
        made.append(time.perf_counter() - t0)
    direct: list[float] = []
    wrapped: list[float] = []
    cg = root.new()
    assert cg is not None
    other: list[float] = []
    for _ in range(COST_RUNS // 3):
        bash = ["bash", "-c", "true"]
        for argv, into in ((bash, direct), (cg.wrap(bash), wrapped), (cg.wrap(["true"]), other)):
            t0 = time.perf_counter()
            subprocess.run(argv, check=True)
            into.append(time.perf_counter() - t0)
    cg.remove()
    root.close()
    return {
        "create + remove a call's cgroup": median(made),
        "spawn `bash -c true` and wait (process group)": median(direct),
        "the same, entering its cgroup in the script's first line": median(wrapped),
        "spawn `true` through the one-line `sh` that enters the cgroup": median(other),
    }


async def main() -> str:
    if CgroupRoot.probe() is None:
        return "### Containment\n\nNo writable cgroup2 hierarchy here: cgroup mode not measured.\n"
    rows = []
    for name, (script, size) in TREES.items():
        results = {m: await _stop_to_dead(m, script, size) for m in ("cgroup", "process_group")}
        cg, pg = results["cgroup"], results["process_group"]
        rows.append(
            [
                name,
                f"{fmt_s(median(cg))} / {fmt_s(pct(cg, 0.99))}",
                f"{fmt_s(median(pg))} / {fmt_s(pct(pg, 0.99))}",
                f"{median(cg) / median(pg):.2f}×",
            ]
        )
    costs = _cgroup_costs()
    cost_rows = [[what, fmt_s(v)] for what, v in costs.items()]
    spawn = costs["spawn `bash -c true` and wait (process group)"]
    added = costs["create + remove a call's cgroup"] + (
        costs["the same, entering its cgroup in the script's first line"] - spawn
    )
    return (
        "### Containment\n\n"
        f"Stop → last member dead, a Bash that honours SIGTERM ({RUNS} stops each, "
        "median / p99):\n\n"
        + table(["tree", "cgroup", "process group", "cgroup ÷ group"], rows)
        + "\n\nPer call:\n\n"
        + table(["what", "median"], cost_rows)
        + f"\n\nA Bash call's cgroup (made, entered, removed) adds {fmt_s(added)} to a "
        f"{fmt_s(spawn)} spawn ({added / spawn:.0%}).\n"
    )


if __name__ == "__main__":
    print(asyncio.run(main()))
