"""``turnwatch ingest``: a foreign runtime's JSON lines into the ledger, spans and metrics.

A followed file is read by inode and offset (``tracing.tail``); how far it was read is kept in the
ledger, queued behind the lines it covers, so a restarted ``ingest --follow`` resumes where the
last one stopped. Ingest deduplicates, so a line read twice (a checkpoint lost in a crash) is
recorded once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

from turnwatch.cli.wiring import Wiring
from turnwatch.runtime.lines import Oversized
from turnwatch.tracing.ingest import BadLine, IngestReport, ingest
from turnwatch.tracing.ledger import connect, get_meta
from turnwatch.tracing.tail import Position, Tail

#: A checkpoint at most this often while lines keep coming (and whenever the file goes quiet).
CHECKPOINT_EVERY_S = 2.0


def offset_key(source: Path) -> str:
    return f"ingest.offset:{source.resolve()}"


def stored_position(ledger: Path, source: Path) -> Position | None:
    """Where the last ``ingest --follow`` of ``source`` into ``ledger`` stopped; ``ValueError``
    for a checkpoint that is none (a damaged row, another version's)."""
    conn = connect(ledger, readonly=True)
    try:
        raw = get_meta(conn, offset_key(source))
    finally:
        conn.close()
    if not raw:
        return None
    try:
        fields = json.loads(raw)
        pos = Position(**fields)
    except (ValueError, TypeError) as exc:
        raise ValueError(str(exc)) from None
    ints = (pos.dev, pos.ino, pos.offset, pos.lineno)
    if any(type(v) is not int or v < 0 for v in ints) or type(pos.head) is not str:
        raise ValueError(f"{raw[:80]!r} holds no file position")
    return pos


def run(
    source: Path,
    wiring: Wiring,
    *,
    follow: bool,
    poll_s: float = 0.2,
    say: Callable[[str], None],
    on_bad: Callable[[BadLine], None],
) -> IngestReport:
    """Read ``source`` (``/dev/stdin`` for a pipe) into ``wiring``; with ``follow``, until
    interrupted, checkpointing how far it was read."""
    regular = source.is_file()
    resume = None
    if follow and regular:
        try:
            resume = stored_position(wiring.ledger.path, source)
        except ValueError as exc:  # read again: what was read before is kept once (dedup)
            where = wiring.ledger.path
            say(
                f"{source}: its checkpoint in {where} is unreadable ({exc}); reading from its start"
            )
    key = offset_key(source) if follow and regular else None

    def checkpoint(pos: Position) -> None:
        if key is not None:  # queued behind the lines up to ``pos``: written after them
            wiring.ledger.put_meta(key, json.dumps(asdict(pos)))

    with Tail(source, follow=follow, poll_s=poll_s, resume=resume, note=say, idle=checkpoint) as t:

        def lines() -> Iterator[tuple[int, bytes | Oversized]]:
            last = time.monotonic()
            try:
                for item in t:
                    yield item
                    if key is not None and time.monotonic() - last > CHECKPOINT_EVERY_S:
                        checkpoint(t.position)
                        last = time.monotonic()
            finally:  # the end of the file, or Ctrl-C: what was read is recorded
                checkpoint(t.position)

        return ingest(lines(), wiring.telemetry, on_bad=on_bad)
