"""The ledger's writer on a bad day: a full disk (a real tmpfs), then space again. It names the
real cause once, keeps what waits in order, and writes it all when it can; nothing is lost
within its backlog's bound. CI runs as root, so these mount and never skip there."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

from tests.conftest import wait_until
from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.tracing import ledger as ledger_module
from turnwatch.tracing.ledger import Ledger, connect, read_events
from turnwatch.tracing.pipeline import Telemetry
from turnwatch.tracing.spans import SpanBuilder


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 384 KiB tmpfs of our own (root only: CI is root, and must run this)."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs as root: the tmpfs tests must run")
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=384k", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path: Path) -> None:
    """Take every byte the file system has left."""
    with contextlib.suppress(OSError), path.open("wb", buffering=0) as f:
        while True:
            f.write(b"\0" * 4096)


def events(n: int, start: int = 0) -> list[Event]:
    return [
        Event(names.TOOL_PROGRESS, "s", float(i), turn="t", call="c", attrs={"text": "x" * 200})
        for i in range(start, start + n)
    ]


def test_a_full_disk_names_its_cause_once_and_loses_nothing_when_space_returns(
    small_fs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = small_fs / "ledger.sqlite3"
    ledger = Ledger(path)
    try:
        ledger.extend(events(10))
        assert ledger.flush(timeout=10)
        filler = small_fs / "filler"
        fill(filler)
        with caplog.at_level(logging.WARNING, logger="turnwatch.ledger"):
            ledger.extend(events(3000, start=10))  # far more than the disk has room for
            assert not ledger.flush(timeout=1.5)  # waiting: not written, not lost
        said = [r.getMessage() for r in caplog.records]
        assert ledger.lost == 0
        assert len(said) == 1, said  # once per outage, not once per batch
        assert "database or disk is full" in said[0]
        assert str(path) in said[0]
        assert "no transaction is active" not in said[0]
        # Space again: the volume grown, as an operator does.
        subprocess.run(["mount", "-o", "remount,size=16m", str(small_fs)], check=True)
        ledger.extend(events(5, start=3010))
        assert ledger.flush(timeout=20)
        assert ledger.lost == 0
    finally:
        ledger.close()
    written = [ev.ts_unix for _seq, ev in read_events(connect(path, readonly=True))]
    assert written == [float(i) for i in range(3015)]  # every event, in order


def test_past_its_bound_the_backlog_drops_the_oldest_and_counts_them(
    small_fs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger_module, "BACKLOG_MAX", 500)
    path = small_fs / "ledger.sqlite3"
    ledger = Ledger(path)
    try:
        assert ledger.flush(timeout=10)
        fill(small_fs / "filler")
        ledger.extend(events(1500))
        assert not ledger.flush(timeout=1.0)
        assert ledger.lost == 1000  # the oldest, counted (turnwatch_ledger_events_lost)
        subprocess.run(["mount", "-o", "remount,size=16m", str(small_fs)], check=True)
        assert ledger.flush(timeout=20)
    finally:
        ledger.close()
    every = [ev for _seq, ev in read_events(connect(path, readonly=True))]
    gap, *written = every  # where the lost were: a ledger.gap (test_ledger_gap.py)
    assert (gap.kind, gap.attrs[names.K_LOST]) == (names.LEDGER_GAP, 1000)
    assert [ev.ts_unix for ev in written] == [float(i) for i in range(1000, 1500)]  # the newest


@pytest.mark.parametrize("spans", [False, True], ids=["observers", "spans_stamp_them"])
def test_the_readers_see_each_event_once_across_an_outage(small_fs: Path, spans: bool) -> None:
    """The span builder and the metrics read each event once, however many times the writer had
    to try it while the disk was full (each failed try folded and read it again). With the span
    builder, each event is read as a new, stamped one: it is still read once, and what the
    writer kept of it is gone once it is written (it grew with every event)."""
    seen: list[float] = []
    ledger = Ledger(small_fs / "ledger.sqlite3")
    builder = SpanBuilder(TracerProvider().get_tracer("t")) if spans else None
    Telemetry(ledger=ledger, spans=builder, observers=[lambda ev: seen.append(ev.ts_unix)])
    started = [
        Event(names.TOOL_REQUESTED, "s", -2.0, turn="t", call="c", tool="Read"),
        Event(names.TOOL_STARTED, "s", -1.0, turn="t", call="c", tool="Read"),
    ]
    try:
        ledger.extend(started)  # the call's span: its events are stamped with its ids
        assert ledger.flush(timeout=10)
        fill(small_fs / "filler")
        ledger.extend(events(1500))
        assert not ledger.flush(timeout=3.0)  # tried and failed, more than once
        subprocess.run(["mount", "-o", "remount,size=16m", str(small_fs)], check=True)
        assert ledger.flush(timeout=20)
        assert len(ledger._writer.read) == 0  # noqa: SLF001 - nothing kept once written
    finally:
        ledger.close()
    assert seen == [-2.0, -1.0, *(float(i) for i in range(1500))]


def holding() -> tuple[threading.Event, threading.Event, Callable[[Event], None]]:
    """A reader that holds the writer at its first event until the gate opens: (entered, gate,
    the reader)."""
    entered, gate = threading.Event(), threading.Event()

    def stuck(ev: Event) -> None:
        entered.set()
        gate.wait(30)

    return entered, gate, stuck


def test_a_writer_far_behind_keeps_a_bounded_queue_and_marks_what_it_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The loop outpacing the writer (a slow disk, a reader stuck in the writer thread): what
    waits for the writer is bounded too. Past the bound new events are counted lost, said once,
    and a ``ledger.gap`` per session marks them once the writer catches up."""
    monkeypatch.setattr(ledger_module, "QUEUE_MAX", 500)
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    entered, gate, stuck = holding()

    Telemetry(ledger=ledger, observers=[stuck])
    try:
        ledger.append(events(1)[0])
        assert entered.wait(10)
        with caplog.at_level(logging.ERROR, logger="turnwatch.ledger"):
            ledger.extend(events(1500, start=1))
            assert ledger._queue.qsize() <= 500  # noqa: SLF001 - the bound itself
            assert ledger.lost == 1000
            gate.set()
            assert ledger.flush(timeout=20)
        said = [r.getMessage() for r in caplog.records]
        assert len(said) <= 2, said  # not a line per event
        assert "behind" in said[0]
    finally:
        gate.set()
        ledger.close()
    every = [ev for _seq, ev in read_events(connect(tmp_path / "ledger.sqlite3", readonly=True))]
    *written, gap = every
    assert [ev.ts_unix for ev in written] == [float(i) for i in range(501)]
    assert (gap.kind, gap.attrs[names.K_LOST]) == (names.LEDGER_GAP, 1000)
    assert (gap.attrs[names.K_FROM_TS], gap.attrs[names.K_TO_TS]) == (501.0, 1500.0)


def test_a_reader_of_a_file_waits_for_the_writer_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ingest`` reads faster than the writer commits (a big file: 221,095 of 400,000 lines
    were dropped, and said to be 'already there'). A producer that may wait (a file, a request;
    never the runtime's loop) waits for the writer past the bound instead of dropping."""
    import io
    import json

    from turnwatch.tracing.ingest import IngestReport, ingest

    monkeypatch.setattr(ledger_module, "QUEUE_MAX", 500)
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    entered, gate, stuck = holding()

    lines = "".join(
        json.dumps({**e.to_json(), "tool": "Grep"}) + "\n" for e in events(1500)
    ).encode()
    telemetry = Telemetry(ledger=ledger, observers=[stuck], dedup=True, wait=True)
    reports: list[IngestReport] = []
    reader = threading.Thread(target=lambda: reports.append(ingest(io.BytesIO(lines), telemetry)))
    try:
        reader.start()
        # The reader is at the bound, the writer held: it waits (it would drop from here on).
        wait_until(lambda: ledger._queue.qsize() >= 500, what="the queue at its bound")  # noqa: SLF001
        assert reader.is_alive()
        gate.set()
        reader.join(20)
        assert entered.is_set()
        assert ledger.flush(timeout=20)
        assert (reports[0].good, ledger.lost, ledger.written) == (1500, 0, 1500)
    finally:
        gate.set()
        ledger.close()
