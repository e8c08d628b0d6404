"""A runtime's events as JSON lines, the ledger written by ``turnwatch ingest --follow`` in a
process of its own: what the runtime records reaches the ledger whole, through a full disk (a
real tmpfs) and through the writer's SIGKILL at any point."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import turnwatch, wait_until
from tests.tracing.test_ledger_faults import fill, small_fs  # noqa: F401 - the fixture
from turnwatch import names
from turnwatch.runtime import LocalHost, MemorySink, Runtime
from turnwatch.runtime.events import Event, FanOut
from turnwatch.testing import check_invariants
from turnwatch.tracing.codec import loads
from turnwatch.tracing.eventlines import EventLines
from turnwatch.tracing.ledger import connect, read_events

ROOT = Path(__file__).resolve().parents[2]


def events(n: int, start: int = 0) -> list[Event]:
    """``n`` progress lines of one Bash call, as a foreign runtime would write them."""
    return [
        Event(names.TOOL_PROGRESS, "s", float(i), turn="t", call="c", tool="Bash", attrs={"n": i})
        for i in range(start, start + n)
    ]


def lines_of(path: Path) -> list[dict[str, Any]]:
    """Every line of the file, each parsed (a broken line fails the test)."""
    return [loads(line) for line in path.read_bytes().splitlines()]


def ledger_events(path: Path, session: str | None = None) -> list[tuple[str, float]]:
    conn = connect(path, readonly=True)
    try:
        return [(ev.kind, ev.ts_unix) for _seq, ev in read_events(conn, session=session)]
    finally:
        conn.close()


async def test_a_stop_recorded_as_lines_reads_into_the_ledger_as_the_runtime_emitted_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "events.jsonl"
    seen = MemorySink()
    with EventLines(out) as lines:
        rt = Runtime(LocalHost(), grace_s=0.5, sink=FanOut(seen, lines))
        turn = rt.start_turn("s", "s.t1")
        turn.request("Bash", {"command": "trap '' TERM; sleep 30"})
        turn.request("Grep", {"pattern": "x", "path": str(tmp_path)})
        await seen.wait_for(names.TOOL_STARTED, tool="Bash")
        await rt.abort("s")
    assert lines.lost == 0
    assert lines.written == len(seen)
    assert [(e["kind"], e["ts"]) for e in lines_of(out)] == [(e.kind, e.ts_unix) for e in seen]
    ledger = tmp_path / "ledger.sqlite3"
    done = turnwatch("ingest", str(out), "--ledger", str(ledger))
    assert done.returncode == 0, done.stderr
    assert ledger_events(ledger) == [(e.kind, e.ts_unix) for e in seen]
    conn = connect(ledger, readonly=True)
    assert check_invariants([ev for _s, ev in read_events(conn)]) == []
    conn.close()


def test_a_full_disk_keeps_the_lines_waiting_in_order_and_writes_them_whole_when_space_returns(
    small_fs: Path,  # noqa: F811 - the fixture
    caplog: pytest.LogCaptureFixture,
) -> None:
    out = small_fs / "events.jsonl"
    sink = EventLines(out)
    try:
        for ev in events(10):
            sink(ev)
        fill(small_fs / "filler")
        with caplog.at_level(logging.WARNING, logger="turnwatch.eventlines"):
            for ev in events(3000, start=10):  # far more than the disk has room for
                sink(ev)
            assert not sink.flush()
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1, said  # once per outage, not once per event
        assert "No space left on device" in said[0]
        assert str(out) in said[0]
        assert sink.lost == 0
        assert sink.failing is not None
        subprocess.run(["mount", "-o", "remount,size=16m", str(small_fs)], check=True)
        assert sink.flush()  # a flush tries at once, whatever the back-off
    finally:
        sink.close()
    assert sink.lost == 0
    # Every line whole (a line the full disk took part of was finished before the next), in order.
    assert [e["ts"] for e in lines_of(out)] == [float(i) for i in range(3010)]


def test_past_its_bound_the_oldest_lines_go_counted_and_a_gap_stands_where_they_were(
    small_fs: Path,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    out = small_fs / "events.jsonl"
    sink = EventLines(out, backlog_max=100)
    try:
        sink(events(1)[0])
        fill(small_fs / "filler")
        for ev in events(250, start=1):
            sink(ev)
        took = sink.written  # the file's last page takes a few lines more after the fill
        lost = sink.lost
        assert lost == 251 - took - 100  # 100 wait (a line the file had begun among them)
        (small_fs / "filler").unlink()
        assert sink.flush()
    finally:
        sink.close()
    assert sink.lost == lost
    got = lines_of(out)  # every line whole
    kinds = [e["kind"] for e in got]
    assert kinds.count(names.LEDGER_GAP) == 1
    at = kinds.index(names.LEDGER_GAP)
    gap = got[at]["attrs"]
    kept = [e["ts"] for e in got if e["kind"] != names.LEDGER_GAP]
    missing = sorted(set(map(float, range(251))) - set(kept))
    assert kept == sorted(kept)
    # The gap counts exactly the oldest lines that waited, and stands where they would have.
    assert gap == {
        names.K_LOST: lost,
        names.K_FROM_TS: missing[0],
        names.K_TO_TS: missing[-1],
        names.K_REASON: "No space left on device",
    }
    assert missing == [float(i) for i in range(int(missing[0]), int(missing[-1]) + 1)]
    # Before it, what the file took (and a begun line's rest); after it, the newest.
    assert kept[at:] == [float(i) for i in range(int(missing[-1]) + 1, 251)]
    ledger = tmp_path / "ledger.sqlite3"
    done = turnwatch("ingest", str(out), "--ledger", str(ledger))
    assert done.returncode == 0, done.stderr
    assert len(ledger_events(ledger)) == 251 - lost + 1


def test_the_writer_killed_at_any_point_and_restarted_records_every_line_once(
    tmp_path: Path,
) -> None:
    out, ledger = tmp_path / "events.jsonl", tmp_path / "ledger.sqlite3"
    sink = EventLines(out)
    total = 6000
    stop = threading.Event()

    def produce() -> None:  # a runtime's stream, as its events arrive
        for i, ev in enumerate(events(total)):
            sink(ev)
            if i % 100 == 0:  # 3 s in all: the last follower reads the tail
                time.sleep(0.05)
        stop.set()

    said = tmp_path / "ingest.err"

    def follower() -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "turnwatch", "ingest", str(out), "--follow"]
        with said.open("ab") as err:
            return subprocess.Popen([*cmd, "--ledger", str(ledger)], cwd=ROOT, stderr=err)

    out.touch()
    writer = follower()
    try:
        threading.Thread(target=produce, daemon=True).start()
        for delay in (0.3, 0.2, 0.5):  # SIGKILLed three times, wherever it is
            time.sleep(delay)
            writer.kill()
            writer.wait()
            writer = follower()
        stop.wait(30)
        # On a busy machine every follower killed may have been killed before it made the
        # ledger, and the last one still starting: no ledger yet is no line yet.
        wait_until(
            lambda: ledger.exists() and len(ledger_events(ledger)) >= total,
            timeout=30,
            what="every line",
        )
        writer.send_signal(signal.SIGINT)
        assert writer.wait(timeout=30) == 0, said.read_text()
    finally:
        if writer.poll() is None:  # a failure above: not left to warn in another test
            writer.kill()
            writer.wait()
    sink.close()
    assert sorted(ts for _k, ts in ledger_events(ledger)) == [float(i) for i in range(total)]


def test_a_name_decoded_with_surrogateescape_is_written_and_ingested(tmp_path: Path) -> None:
    """Python writes a lone surrogate as ``"\\udcff"``: valid JSON that orjson refuses, so
    ``ingest`` rejected the very line EventLines wrote ("not JSON: invalid high surrogate"),
    and the event was lost between the runtime and the ledger. Read, it is kept as the ledger
    keeps such a name (escaped); ingested again, it adds nothing; pruned, its key goes too."""
    lines, ledger = tmp_path / "events.jsonl", tmp_path / "ledger.sqlite3"
    out = EventLines(lines)
    out(Event(names.TURN_STARTED, "s\udcff", 1e9, turn="t"))
    out(Event(names.TOOL_REQUESTED, "s\udcff", 1e9, turn="t", call="c", tool="Grep\udcfe"))
    settled = {"outcome": "completed", "path": "/caf\udce9"}
    out(Event(names.TURN_SETTLED, "s\udcff", 1e9, turn="t", attrs=settled))
    out(Event(names.PROCESSING_CLEARED, "s\udcff", 1e9, turn="t"))
    out.close()
    for _ in range(2):
        done = turnwatch("ingest", str(lines), "--ledger", str(ledger))
        assert done.returncode == 0, done.stderr
    conn = connect(ledger)
    evs = [ev for _s, ev in read_events(conn)]
    assert [(e.session, e.tool) for e in evs][:2] == [
        ("s\\udcff", None),
        ("s\\udcff", "Grep\\udcfe"),
    ]
    assert evs[2].attrs == settled
    assert len(evs) == 4
    assert turnwatch("prune", "--older-than", "1d", "--ledger", str(ledger)).returncode == 0
    assert conn.execute("SELECT count(*) FROM ingested").fetchone()[0] == 0
    loads(b'"\\ud800"')  # the escape alone is JSON
    with pytest.raises(ValueError, match="NaN is not JSON"):
        loads(b'{"a": NaN, "b": "\\udcff"}')  # and what else orjson refuses stays refused
