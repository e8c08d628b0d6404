"""A followed file read in any pieces, with ``watch --agents`` restarted at any points, gives the
events of one reading of the whole file: nothing twice, nothing lost, whatever the adapter held
(a turn, calls in flight) carried in its checkpoint. Every recorded session of the three CLIs."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.integrations.agent_arcs import DATA
from tests.integrations.test_agentlogs_follow import Harness, unlogged
from turnwatch.runtime.events import Event

_DIRS = {"codex": "codex", "claude-code": "claudecode", "gemini-cli": "gemini-cli"}
_FILES = sorted(
    (fmt, path)
    for fmt, d in _DIRS.items()
    for path in DATA.glob(f"{d}/*/*/recordings/*/transcript.jsonl")
)


def _placed(root: Path, fmt: str) -> Path:
    """Where the CLI keeps a session file under its root."""
    if fmt == "codex":
        return root / "2026" / "05" / "23" / "rollout-2026-05-23T23-03-45-x.jsonl"
    if fmt == "gemini-cli":
        return root / "tmp" / "h" / "chats" / "session-x.jsonl"
    return root / "-home-me" / "db57d2ab.jsonl"


def _follow(fmt: str, data: bytes, cuts: list[int]) -> list[Event]:
    """``data`` written in pieces ending at ``cuts``, a new follower (a restart) for each, each
    stopped as soon as it has read its piece; the last piece is an hour old when read."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = _placed(root, fmt)
        path.parent.mkdir(parents=True)
        path.touch()
        store: dict[str, str] = {}
        events: list[Event] = []
        for end in [*cuts, len(data)]:
            with path.open("ab") as out:
                out.write(data[path.stat().st_size : end])
            if end == len(data):  # the CLI is done with it: quiet for an hour
                os.utime(path, (time.time() - 3600,) * 2)
            h = Harness(fmt, root, store)
            h.f.poll()
            h.f.close()
            events += h.events
        return unlogged(events)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.sampled_from(_FILES), permille=st.lists(st.integers(0, 999), max_size=4))
# A restart between Gemini CLI's reply and its rewrite with tool calls (the test below).
@example(which=next(f for f in _FILES if "gemini-cli/scenarios/2-2_" in str(f[1])), permille=[600])
def test_restarts_at_any_points_give_the_events_of_one_reading(
    which: tuple[str, Path], permille: list[int]
) -> None:
    fmt, path = which
    data = path.read_bytes()
    cuts = sorted({len(data) * p // 1000 for p in permille})
    assert _follow(fmt, data, cuts) == _follow(fmt, data, [])


def _gemini_rewritten_reply() -> Path:
    (path,) = [p for f, p in _FILES if f == "gemini-cli" and "2-2_auto" in str(p)]
    return path


def test_a_restart_between_a_reply_and_its_rewrite_ends_no_turn(tmp_path: Path) -> None:
    """Gemini CLI writes the model's reply, then the same reply again with its tool calls. A
    ``watch --agents`` stopped between the two (a restart, ``--once``) decided the reply ended
    the turn: a ``turn.settled`` before the turn's tool call, and none at its real end."""
    data = _gemini_rewritten_reply().read_bytes()
    lines = data.splitlines(keepends=True)
    reply = next(i for i, ln in enumerate(lines) if b'"type":"gemini"' in ln.replace(b" ", b""))
    cut = len(b"".join(lines[: reply + 1]))

    events = _follow("gemini-cli", data, [cut])

    kinds = [e.kind for e in events]
    assert kinds.count("turn.settled") == 1
    assert kinds.index("turn.settled") > kinds.index("tool.finished")
    assert events == _follow("gemini-cli", data, [])
