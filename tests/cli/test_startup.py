"""Start-up: the triage commands do not pay for what they do not use.

``turnwatch sessions`` read a ledger in 0.95 s because the table renderer imported the demo and,
through it, the MCP SDK. Timing is measured in ``make bench`` (this machine is shared); here we
check the cause cannot come back: what the commands import.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import streams

# asyncio (~35 ms) and psutil (~20 ms): these commands read a ledger and /proc, nothing more.
HEAVY = (
    "mcp",
    "opentelemetry.sdk",
    "turnwatch.runtime.tools",
    "turnwatch.cli.demo.scenario",
    "asyncio",
    "psutil",
)

PROBE = """
import json, sys
out, argv = sys.argv[1], sys.argv[2:]
sys.argv = ["turnwatch", *argv]
from turnwatch.cli.app import main
try:
    main()
except SystemExit:
    pass
with open(out, "w") as f:
    json.dump(sorted(sys.modules), f)
"""


def imported(tmp_path: Path, *argv: str) -> set[str]:
    out = tmp_path / "modules.json"
    subprocess.run(
        [sys.executable, "-c", PROBE, str(out), *argv], capture_output=True, timeout=60, check=True
    )
    return set(json.loads(out.read_text()))


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return streams.ledger(tmp_path / "ledger.sqlite3")


@pytest.mark.parametrize(
    "argv",
    [["sessions"], ["sessions", "--json"], ["explain", "pinned"]],
    ids=" ".join,
)
def test_triage_commands_import_nothing_they_do_not_use(
    tmp_path: Path, ledger: Path, argv: list[str]
) -> None:
    mods = imported(tmp_path, *argv, "--ledger", str(ledger))
    assert "turnwatch.tracing.view" in mods  # it did read the ledger
    heavy = sorted(m for m in mods if m.startswith(HEAVY))
    assert heavy == []


@pytest.mark.parametrize(
    "argv",
    [["watch", "--once", "--no-recover"], ["recover", "pinned", "--dry-run"]],
    ids=" ".join,
)
def test_one_scan_serves_no_metrics_and_reads_no_agent_logs(
    tmp_path: Path, ledger: Path, argv: list[str]
) -> None:
    """Without --agents and outside the loop, neither the metrics server nor the agent CLIs'
    readers are wanted (~65 ms of imports); a look records nothing, so it builds no spans (the
    OpenTelemetry SDK, ~30 ms), and it reads /proc itself (psutil, ~15 ms) (#31). Nor does it
    become a subreaper (ctypes)."""
    mods = imported(tmp_path, *argv, "--ledger", str(ledger))
    assert "turnwatch.watchdog.scan" in mods  # it did scan
    unwanted = (
        "prometheus_client",
        "turnwatch.integrations.agentlogs",
        "turnwatch.exporters.http",
        "turnwatch.exporters.otel",
        "opentelemetry.sdk",
        "psutil",
        "ctypes",  # only to become a subreaper, which a look never does (~2 ms)
        # A look writes nothing: no ledger writer thread, no pipeline feeding it (~3 ms).
        "turnwatch.tracing.ledger_writer",
        "turnwatch.tracing.ledger_batch",
        "turnwatch.tracing.pipeline",
    )
    assert sorted(m for m in mods if m.startswith(unwanted)) == []
    assert "turnwatch.tracing.ledger" not in mods


def test_a_look_runs_no_event_loop(tmp_path: Path, ledger: Path) -> None:
    """``watch --once --no-recover`` scans and reports, and awaits nothing: no event loop, and
    none of asyncio's ~30 ms of imports (ssl, concurrent.futures among them) (#31). A recovery,
    which waits out grace windows, still runs on one (``recover --dry-run`` too: it plans the
    same recovery)."""
    mods = imported(tmp_path, "watch", "--once", "--no-recover", "--ledger", str(ledger))
    assert "turnwatch.watchdog.scan" in mods  # it did scan
    assert sorted(m for m in mods if m.startswith(("asyncio", "ssl", "concurrent"))) == []


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["sessions"], "sessions"),
        (["explain", "pinned"], "explain"),
        (["watch", "--once", "--no-recover"], "watch"),
        (["recover", "pinned", "--dry-run"], "recover"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_command_builds_only_itself(
    tmp_path: Path, ledger: Path, argv: list[str], command: str
) -> None:
    """typer turns every parameter of every registered command into a click one (a pydantic
    adapter each) before it parses: ~50 ms for the nine commands, of which one runs. The others'
    modules are not even imported (#31)."""
    mods = imported(tmp_path, *argv, "--ledger", str(ledger))
    commands = {m.rsplit(".", 1)[1] for m in mods if m.startswith("turnwatch.cli.commands.")}
    assert commands == {command}


def test_the_help_still_lists_every_command() -> None:
    from turnwatch.cli.app import COMMANDS

    out = subprocess.run(
        [sys.executable, "-m", "turnwatch", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    assert COMMANDS  # nine
    assert [c for c in COMMANDS if f" {c} " not in out] == []
