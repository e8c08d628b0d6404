"""A followed file's checkpoint lives as long as its file: the ledger keeps no place of a file
that is gone (design §2.7: disk bounded by what is live). Claude Code deletes its transcripts
after 30 days; each one followed left its checkpoint in the ledger for ever."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integrations.test_agentlogs_follow import CLAUDE, Harness
from turnwatch.integrations.agentlogs import follow
from turnwatch.integrations.agentlogs.follow import key


def _project(root: Path, n: int) -> list[Path]:
    proj = root / "proj"
    proj.mkdir(parents=True, exist_ok=True)
    files = [proj / f"{i:08x}.jsonl" for i in range(n)]
    for f in files:
        f.write_bytes(CLAUDE.read_bytes())
    return files


def test_a_file_that_vanishes_takes_its_checkpoint_with_it(tmp_path: Path) -> None:
    files = _project(tmp_path, 3)
    h = Harness("claude-code", tmp_path)
    h.f.poll(final=True)
    assert set(h.store) == {key(f) for f in files}
    files[0].unlink()

    h.f.poll()

    assert set(h.store) == {key(f) for f in files[1:]}


def test_a_quiet_file_let_go_then_deleted_takes_its_checkpoint_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(follow, "QUIET_S", 0.05)
    monkeypatch.setattr(follow, "IDLE_S", 0.1)
    files = _project(tmp_path, 2)
    h = Harness("claude-code", tmp_path)
    h.f.poll()
    time.sleep(0.1)
    h.f.poll()  # quiet: its end decided, its place saved
    time.sleep(0.15)
    h.f.poll()
    assert h.f.files == {}  # both let go: only their size and time are held
    files[0].unlink()

    h.f.poll()

    assert set(h.store) == {key(files[1])}


def test_a_start_forgets_the_checkpoints_of_files_deleted_while_nothing_followed(
    tmp_path: Path,
) -> None:
    """Deleted while no watch ran: under a root followed now and gone, forgotten; under a root
    not followed now (another run's ``--claude-dir``), or still there, kept."""
    root, elsewhere = tmp_path / "projects", tmp_path / "other"
    (live,) = _project(root, 1)
    store = {
        key(live): "{}",  # unreadable: the file is read from its start, the key kept
        key(root / "proj" / "deleted.jsonl"): "{}",
        key(root / "gone-project" / "deleted.jsonl"): "{}",
        key(elsewhere / "proj" / "x.jsonl"): "{}",
    }
    h = Harness("claude-code", root, store)

    h.f.poll(final=True)

    assert set(h.store) == {key(live), key(elsewhere / "proj" / "x.jsonl")}


def test_a_root_missing_now_keeps_the_checkpoints_under_it(tmp_path: Path) -> None:
    """An unmounted home, a CLI not installed yet: nothing is known gone, nothing forgotten."""
    root = tmp_path / "projects"
    store = {key(root / "proj" / "a.jsonl"): "{}"}
    h = Harness("claude-code", root, dict(store))

    h.f.poll(final=True)

    assert h.store == store
