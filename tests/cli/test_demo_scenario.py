"""The demo's story holds on a slow machine: each call it shows is in the state it shows at the
click, however long the steps before the click took."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from turnwatch import names
from turnwatch.cli.demo import scenario
from turnwatch.runtime.events import Event, MemorySink

pytestmark = pytest.mark.timeout(240)


async def test_the_mcp_deploy_is_in_flight_at_the_click_after_slow_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deploy (1.5 s) is there to outlive the stop. Requested with the first calls, it ran
    from the start of the scenario, and a machine slow enough to take 2 s over the steps before
    the click (here: the Write's prompt, seen 2 s late) had it done before the stop."""
    seen = MemorySink.wait_for

    async def slow(self: MemorySink, kind: str, **match: Any) -> Event:
        if kind == names.PERMISSION_REQUESTED:
            await asyncio.sleep(2.0)
        return await seen(self, kind, **match)

    monkeypatch.setattr(MemorySink, "wait_for", slow)
    report = await scenario.run_demo(grace_s=1.0, workdir=tmp_path, pin_for_s=0.5)
    (deploy,) = [c for c in report.calls if c.tool == "MCP deploy"]
    assert deploy.outcome == "completed_after_stop"
    assert report.leftover_pids == []
