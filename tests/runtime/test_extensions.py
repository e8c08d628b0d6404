"""Extension tools (MCP and plugins): awaited on a stop, each server behaviour recorded as it is."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import until
from turnwatch import names
from turnwatch.runtime import CallHandle, LocalHost, MemorySink, Outcome, Runtime
from turnwatch.runtime.tools.mcp import McpServerConfig
from turnwatch.runtime.tools.plugins import PluginCancelled, PluginError
from turnwatch.testing import check_invariants
from turnwatch.tracing.ledger import Ledger, connect
from turnwatch.watchdog.loop import Watchdog
from turnwatch.watchdog.scan import Config

ROOT = Path(__file__).resolve().parents[2]
NPM_PACKAGES = (
    "@modelcontextprotocol/server-everything",
    "@modelcontextprotocol/server-filesystem",
)


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[LocalHost]:
    h = LocalHost()
    yield h
    await h.close()


async def start_testing_server(host: LocalHost, log: Path) -> None:
    await host.add_mcp_server(
        McpServerConfig("t", sys.executable, ("-m", "turnwatch.testing_mcp", "--log", str(log)))
    )


def is_testing_server(proc: psutil.Process) -> bool:
    try:
        return "turnwatch.testing_mcp" in " ".join(proc.cmdline())
    except psutil.Error:  # exited meanwhile, or a zombie adopted from an earlier test
        return False


async def stop_testing_call(
    host: LocalHost, log: Path, tool: str, args: dict[str, object]
) -> tuple[MemorySink, CallHandle]:
    """Call ``tool`` of the testing server and stop it once it reports progress."""
    await start_testing_server(host, log)
    sink = MemorySink()
    rt = Runtime(host, grace_s=0.3, sink=sink)
    call = rt.start_turn("s").request(f"mcp__t__{tool}", args)
    await started(sink, call.call_id)
    await rt.abort("s")
    return sink, call


async def started(sink: MemorySink, call: str) -> None:
    await until(lambda: sink.of(names.TOOL_PROGRESS, call=call), what=f"{call} progress")


async def test_late_real_result_is_awaited_and_never_shown_as_plain_success(
    host: LocalHost, tmp_path: Path
) -> None:
    log = tmp_path / "cancels.log"
    sink, call = await stop_testing_call(host, log, "deploy", {"seconds": 1.0})

    result = await call.result()
    assert result.outcome is Outcome.COMPLETED_AFTER_STOP
    assert "cancel ignored" in result.output
    kinds = sink.kinds(session="s")
    assert (
        kinds.index(names.TOOLS_ABORT_SENT)
        < kinds.index(names.TOOL_FINISHED)
        < kinds.index(names.TURN_SETTLED)
    )
    (cancelled,) = log.read_text().split()  # the server received exactly one cancel ...
    assert cancelled.startswith("turnwatch-")  # ... for the request id the host minted
    assert check_invariants(sink) == []


async def test_error_reply_to_the_cancel_is_cancelled_by_server(
    host: LocalHost, tmp_path: Path
) -> None:
    sink, call = await stop_testing_call(
        host, tmp_path / "cancels.log", "errors_on_cancel", {"seconds": 30}
    )
    result = await call.result()
    assert result.outcome is Outcome.ABORTED
    (finished,) = sink.of(names.TOOL_FINISHED, call=call.call_id)
    assert finished.attrs["status"] == "cancelled_by_server"
    assert (tmp_path / "cancels.log").read_text().strip()


async def test_no_reply_stays_awaited_and_the_watchdog_reports_it(
    host: LocalHost, tmp_path: Path
) -> None:
    await start_testing_server(host, tmp_path / "cancels.log")
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    rt = Runtime(host, grace_s=0.3, sink=ledger)
    call = rt.start_turn("s").request("mcp__t__never_replies", {})
    conn = connect(path, readonly=True)
    await until(
        lambda: (
            ledger.flush(),
            conn.execute("SELECT count(*) FROM events WHERE kind='tool.progress'").fetchone()[0],
        )[1],
        what="the call's heartbeat",
    )
    stop = asyncio.ensure_future(rt.abort("s"))
    await asyncio.sleep(0.6)
    assert not stop.done()  # awaited: the turn is not reported settled
    ledger.flush()
    dog = Watchdog(
        path,
        ledger,
        ledger.flush,
        cfg=Config(grace_s=0.1, slack_s=0.1, await_overdue_s=0.3, rpc_stuck_s=60),
    )
    cycle = await dog.cycle()
    overdue = [f for f in cycle.findings if f.kind == names.F_AWAIT_OVERDUE]
    assert [f.call for f in overdue] == [call.call_id]
    assert {a.result for a in cycle.actions} <= {"report_only"}
    server = [p for p in psutil.Process().children() if is_testing_server(p)]
    assert server
    assert server[0].is_running()  # never signalled

    await host.close()  # the operator restarts the server: only then does the call end

    await asyncio.wait_for(stop, 10)
    assert (await call.result()).outcome is Outcome.FAILED
    ledger.close()
    conn.close()


async def test_plugins_are_awaited_and_may_honour_the_cancel(host: LocalHost) -> None:
    async def polite(args: object, cancel: asyncio.Event) -> str:
        await cancel.wait()
        raise PluginCancelled("stopped cleanly")

    async def stubborn(args: object, cancel: asyncio.Event) -> str:
        await cancel.wait()
        await asyncio.sleep(0.3)  # finishes what it started
        return "published"

    host.register_plugin("polite", polite)
    host.register_plugin("stubborn", stubborn)
    sink = MemorySink()
    rt = Runtime(host, grace_s=0.1, sink=sink)
    turn = rt.start_turn("s")
    a, b = turn.request("polite", {}), turn.request("stubborn", {})
    await until(lambda: len(sink.of(names.TOOL_STARTED)) == 2, what="both plugins")
    await rt.abort("s")
    assert (await a.result()).outcome is Outcome.ABORTED
    assert (await b.result()).outcome is Outcome.COMPLETED_AFTER_STOP
    assert sink.kinds().index(names.TURN_SETTLED) > max(
        i for i, e in enumerate(sink.events) if e.kind == names.TOOL_FINISHED
    )
    assert {e.attrs["class"] for e in sink.of(names.TOOL_REQUESTED)} == {"extension"}


def test_plugins_load_from_the_entry_point_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tw_demo_plugin.py").write_text(
        textwrap.dedent("""
        async def shout(args, cancel):
            return str(args.get("text", "")).upper()
    """)
    )
    dist = tmp_path / "tw_demo_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tw-demo-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[turnwatch.plugins]\nshout = tw_demo_plugin:shout\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    async def run() -> str:
        h = LocalHost(subreaper=False)
        assert h.load_plugins() == ["shout"]
        rt = Runtime(h)
        return (await rt.start_turn("s").request("shout", {"text": "stop"}).result()).output

    assert asyncio.run(run()) == "STOP"


def npm_servers() -> Path:
    """The reference servers, installed from the npm registry on first use (CI pre-installs)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        if os.environ.get("TURNWATCH_REQUIRE_NODE"):
            pytest.fail("node and npm are required here (TURNWATCH_REQUIRE_NODE is set)")
        pytest.skip("Node.js is not installed: the reference MCP server tests need node and npm")
    prefix = Path(os.environ.get("TURNWATCH_MCP_SERVERS", ROOT / ".cache" / "mcp-servers"))
    bins = prefix / "node_modules" / ".bin"
    if not all((bins / b).exists() for b in ("mcp-server-everything", "mcp-server-filesystem")):
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix), *NPM_PACKAGES],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return bins


async def test_server_everything_long_operation_stopped_mid_run(host: LocalHost) -> None:
    bins = npm_servers()
    await host.add_mcp_server(
        McpServerConfig("ev", str(bins / "mcp-server-everything"), ("stdio",))
    )
    sink = MemorySink()
    rt = Runtime(host, grace_s=0.3, sink=sink)
    call = rt.start_turn("s").request(
        "mcp__ev__trigger-long-running-operation", {"duration": 2, "steps": 8}
    )
    await started(sink, call.call_id)
    stop = asyncio.ensure_future(rt.abort("s"))
    # The server keeps working after the cancel and, as the spec asks, never replies to a
    # cancelled request: the call stays awaited while its heartbeat goes on.
    await until(
        lambda: len(sink.of(names.TOOL_PROGRESS, call=call.call_id)) >= 6,
        what="heartbeats after the stop",
    )
    cut = sink.kinds().index(names.TOOLS_ABORT_SENT)
    assert [e for e in sink.events[cut:] if e.kind == names.TOOL_PROGRESS]
    await asyncio.sleep(0.5)
    assert not stop.done()
    await host.close()
    await asyncio.wait_for(stop, 10)
    assert sink.kinds().index(names.TOOL_FINISHED) < sink.kinds().index(names.TURN_SETTLED)


async def test_server_filesystem_write_in_flight_is_awaited_and_whole(
    host: LocalHost, tmp_path: Path
) -> None:
    bins = npm_servers()
    root = tmp_path / "root"
    root.mkdir()
    await host.add_mcp_server(
        McpServerConfig("fs", str(bins / "mcp-server-filesystem"), (str(root),))
    )
    sink = MemorySink()
    rt = Runtime(host, grace_s=0.3, sink=sink)
    content = "0123456789abcdef\n" * 250_000  # 4 MB
    target = root / "notes.txt"
    call = rt.start_turn("s").request(
        "mcp__fs__write_file", {"path": str(target), "content": content}
    )
    await until(lambda: sink.of(names.TOOL_STARTED, call=call.call_id), what="the write")
    stop = asyncio.ensure_future(rt.abort("s"))
    size = len(content.encode())
    await until(
        lambda: target.exists() and target.stat().st_size == size,
        what="the server to finish writing",
    )
    if not stop.done():
        await host.close()  # no reply to a cancelled request: the operator ends it
    await asyncio.wait_for(stop, 10)
    # The settlement came after the call ended, and the file is whole, never a part.
    assert sink.kinds().index(names.TOOL_FINISHED) < sink.kinds().index(names.TURN_SETTLED)
    assert target.read_text() == content


def test_a_plugin_that_cannot_be_loaded_is_named_with_its_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own ``ModuleNotFoundError`` named neither the plugin nor that it was one."""
    (tmp_path / "tw_broken_plugin.py").write_text("import tw_no_such_dependency\n")
    dist = tmp_path / "tw_broken_plugin-2.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tw-broken-plugin\nVersion: 2.0\n")
    (dist / "entry_points.txt").write_text("[turnwatch.plugins]\nfetch = tw_broken_plugin:fetch\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    with pytest.raises(PluginError) as got:
        LocalHost(subreaper=False).load_plugins()
    assert str(got.value) == (
        "plugin 'fetch' (tw_broken_plugin:fetch, from tw-broken-plugin 2.0) could not be "
        "loaded: ModuleNotFoundError: No module named 'tw_no_such_dependency'"
    )
    assert isinstance(got.value, ImportError)
