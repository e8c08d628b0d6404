"""What a failed call says of itself, recorded bounded: its head and how much more.

A tool whose error was 20 MB of text (a server's message, a repr of a huge exception) put
20 MB into the ledger's row and the call's span: one such span fails the whole OTLP batch it is
sent in. The caller still gets the whole error; the record keeps its first
``ERROR_TEXT_CAP`` characters and says how many more there were.
"""

from __future__ import annotations

from pathlib import Path

from turnwatch import names
from turnwatch.runtime import HostResult, HostStatus, LocalHost, MemorySink, Runtime
from turnwatch.runtime.messages import ERROR_TEXT_CAP
from turnwatch.runtime.tools.context import ToolContext
from turnwatch.tracing.ledger import Ledger

HUGE = "E" * 5_000_000


async def huge_error(ctx: ToolContext) -> HostResult:
    return HostResult(HostStatus.ERROR, error=HUGE)


async def raises(ctx: ToolContext) -> HostResult:
    raise RuntimeError("R" * 5_000_000)


async def test_a_huge_error_is_recorded_as_its_head_and_a_count(tmp_path: Path) -> None:
    sink = MemorySink()
    host = LocalHost(subreaper=False)
    host.register("huge", huge_error)
    host.register("raises", raises)
    rt = Runtime(host, sink=sink)
    turn = rt.start_turn("s")
    told = await turn.request("huge", {}, tool_class="mutating").result()
    raised = await turn.request("raises", {}, tool_class="mutating").result()
    await turn.finish()
    assert told.error == HUGE  # the caller's, whole
    for call in (told.call_id, raised.call_id):
        (ev,) = sink.of(names.TOOL_FINISHED, call=call)
        said = ev.attrs[names.K_ERROR]
        assert len(said) < ERROR_TEXT_CAP + 100, len(said)
        assert "more characters" in said
    (ev,) = sink.of(names.TOOL_FINISHED, call=told.call_id)
    assert ev.attrs[names.K_ERROR].startswith("E" * ERROR_TEXT_CAP)


async def test_the_ledger_stays_small_after_a_huge_error(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    host = LocalHost(subreaper=False)
    host.register("huge", huge_error)
    rt = Runtime(host, sink=ledger)
    turn = rt.start_turn("s")
    await turn.request("huge", {}, tool_class="mutating").result()
    await turn.finish()
    ledger.flush(timeout=30)
    ledger.close()
    size = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert size < 1_000_000, size  # before: 5 MB and more
