"""An application whose event loop ends with a process call in flight leaves nothing of it.

A service that returns from its main coroutine (its shutdown signal handled, an error raised)
has ``asyncio.run`` cancel what is left: the call's task among them. That killed the call's
first process alone; a child that ignores SIGTERM lived on (re-parented to init, in process-group
mode with nothing left to prove it the call's).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from tests.conftest import Procs, require_cgroups, until
from tests.runtime.test_containment import MODES, pids_in

APP = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from turnwatch.runtime import LocalHost, Runtime

    async def main(mode: str, pids: Path) -> None:
        rt = Runtime(LocalHost(containment=mode))
        turn = rt.start_turn("s")
        script = (
            f"(trap '' TERM; echo pid=$BASHPID >> {pids}; exec sleep 1000) & "
            f"setsid sh -c 'echo pid=$$ >> {pids}; exec sleep 1000' & "
            f"echo pid=$$ >> {pids}; wait"
        )
        turn.request("Bash", {"command": script})
        while not pids.exists() or len(pids.read_text().split()) < 3:
            await asyncio.sleep(0.01)
        # The application shuts down: asyncio.run cancels what is still running.

    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
    """
)


@pytest.mark.parametrize("mode", MODES)
async def test_nothing_of_a_call_outlives_its_runtimes_event_loop(
    mode: str, tmp_path: Path, procs: Procs
) -> None:
    if mode == "cgroup":
        require_cgroups()
    pids = tmp_path / "pids"
    app = subprocess.run(
        [sys.executable, "-c", APP, mode, str(pids)], capture_output=True, text=True, timeout=60
    )
    assert app.returncode == 0, app.stderr
    left = pids_in(pids.read_text())
    assert len(left) == 3
    for pid in left:
        with contextlib.suppress(psutil.NoSuchProcess):  # gone already: as it should be
            procs.track(pid)
    await until(lambda: procs.alive() == [], timeout=2.0, what="every process of the call dead")
