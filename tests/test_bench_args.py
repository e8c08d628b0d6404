"""``python -m benchmarks`` refuses what it does not know in one line, exit 2, and runs nothing
(``benchmarks/latest.md`` is left as it was)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_an_unknown_argument_is_one_line_exit_2_and_writes_nothing() -> None:
    latest = ROOT / "benchmarks" / "latest.md"
    before = latest.read_bytes()
    r = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--no-soka"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "error: unknown argument ['--no-soka']; usage: python -m benchmarks [--no-soak]"
    ]
    assert r.stdout == ""
    assert latest.read_bytes() == before
