"""The watchdog beside its runtime does not depend on the ledger: a pinned session of that
runtime is found in the runtime's own state and recovered with its own ``abort()``, while the
ledger cannot even be read. A real legacy runtime, a real hung read (a named pipe)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.conftest import GRACE, until
from turnwatch import names
from turnwatch.runtime import LocalHost, MemorySink, Mode, Receipt, Runtime
from turnwatch.runtime.model import FindingKind, RecoveryResult
from turnwatch.watchdog.loop import Watchdog
from turnwatch.watchdog.scan import Config


async def test_beside_its_runtime_the_watchdog_recovers_a_pinned_session_with_no_ledger(
    tmp_path: Path, fifo: Path
) -> None:
    sink = MemorySink()
    rt = Runtime(LocalHost(), mode=Mode.LEGACY, grace_s=GRACE, sink=sink)
    rt.start_turn("s").request("Read", {"path": str(fifo)})  # legacy: the stop never reaches it
    await until(lambda: any(e.kind == names.TOOL_STARTED for e in sink), what="the read")
    stop = asyncio.ensure_future(rt.abort("s"))
    nowhere = tmp_path / "not-a-ledger"
    nowhere.mkdir()  # what the watchdog was told is its ledger cannot be read at all
    said: list[str] = []
    dog = Watchdog(
        nowhere,
        sink,
        lambda: None,
        cfg=Config(grace_s=GRACE, rpc_stuck_s=0.3),
        runtime=rt,
        say=said.append,
    )
    assert (await dog.cycle()).findings == []  # not pinned yet: the stop is 0.3 s young
    await asyncio.sleep(0.4)
    assert not stop.done()  # pinned: the legacy stop waits for the read
    cycle = await dog.cycle()
    assert [(f.kind, f.session) for f in cycle.findings] == [(FindingKind.PINNED_SESSION, "s")]
    assert "runtime's own state" in cycle.findings[0].detail
    assert [a.result for a in cycle.actions] == [RecoveryResult.OK]
    assert await asyncio.wait_for(stop, 5) is Receipt.ACCEPTED  # the walk released the read
    assert rt.session("s").processing is False
    assert said.count(said[0]) == 1
    assert "cannot read the ledger" in said[0]
    assert (await dog.cycle()).findings == []  # recovered: nothing holds it any more
