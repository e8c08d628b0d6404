"""The soak benchmark scaled down (``benchmarks/soak.py``): what a long-lived runtime and its
pruned ledger keep is bounded by what is live, counted, never timed."""

from __future__ import annotations

from pathlib import Path

from benchmarks import soak

from turnwatch.runtime.retention import MAX_SETTLED_TURNS


async def test_a_long_run_keeps_what_is_live_and_recent_not_its_history(tmp_path: Path) -> None:
    done = await soak.run(
        3000, tmp_path, checkpoints=(0.5, 1.0), prune_every=500, retain_s=0.0, max_settled=300
    )
    assert [p.served for p in done.points] == [1500, 3000]
    for p in done.points:
        # The runtime: its live sessions and at most max_settled settled ones.
        assert p.held <= 300 + soak.LIVE
        # The ledger: pruned every 500 sessions of everything settled, so what came since and
        # the live ones.
        assert p.rows <= 500 + soak.LIVE
        assert p.rows >= soak.LIVE
        assert p.lost == 0  # the runtime waits for its writer, as a runtime's tools pace it


async def test_the_long_session_benchmark_runs_and_holds_its_bound() -> None:
    text = await soak.long_session(1000, marks=(0.5, 1.0))
    held = [row.split("|")[4].strip() for row in text.splitlines() if row.startswith("| 1,000")]
    assert held
    assert int(held[0].replace(",", "")) <= 2 * MAX_SETTLED_TURNS + 1
