"""Edit changes what it was asked to change, and nothing else of the file.

Before: a file with Windows line endings came back with every ``\\r\\n`` turned into ``\\n``
(``read_text`` translates them); an empty ``old`` with ``replace_all`` put ``new`` between
every two characters; a file that is not UTF-8 text failed with Python's
``UnicodeDecodeError`` and a traceback in the runtime's log.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from turnwatch.runtime import LocalHost, MemorySink, Outcome, Runtime, ToolResult


async def edit(path: Path, **args: Any) -> ToolResult:
    runtime = Runtime(LocalHost(), sink=MemorySink())
    turn = runtime.start_turn("s1")
    result = await turn.request("Edit", {"path": str(path), **args}).result()
    await turn.finish()
    return result


@pytest.mark.parametrize(
    ("before", "old", "new", "after"),
    [
        pytest.param(b"a\r\nold\r\nz\r\n", "old", "new", b"a\r\nnew\r\nz\r\n", id="crlf"),
        pytest.param(b"a\r\nb\nold\rz", "old", "new", b"a\r\nb\nnew\rz", id="mixed"),
        pytest.param(
            b"one\r\ntwo\r\nthree\r\n",
            "one\ntwo\n",
            "1\n2\n",
            b"1\r\n2\r\nthree\r\n",
            id="crlf, the lines as a model writes them",
        ),
        pytest.param(b"x\xc3\xa9\r\n", "x", "y", b"y\xc3\xa9\r\n", id="utf-8"),
        pytest.param(b"\xef\xbb\xbfold\n", "old", "new", b"\xef\xbb\xbfnew\n", id="bom kept"),
    ],
)
async def test_only_what_was_asked_changes(
    tmp_path: Path, before: bytes, old: str, new: str, after: bytes
) -> None:
    target = tmp_path / "f.txt"
    target.write_bytes(before)
    result = await edit(target, old=old, new=new)
    assert result.outcome is Outcome.COMPLETED, result
    assert target.read_bytes() == after


@pytest.mark.parametrize("replace_all", [True, False])
async def test_an_empty_old_is_refused_and_the_file_left_alone(
    tmp_path: Path, replace_all: bool
) -> None:
    target = tmp_path / "f.txt"
    target.write_bytes(b"abc")
    result = await edit(target, old="", new="X", replace_all=replace_all)
    assert result.outcome is Outcome.FAILED
    assert result.error is not None
    assert "'old'" in result.error
    assert target.read_bytes() == b"abc"


async def test_a_file_that_is_not_utf8_text_is_a_clear_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "image.bin"
    target.write_bytes(b"\xff\xfe\x00old")
    result = await edit(target, old="old", new="new")
    assert result.outcome is Outcome.FAILED
    assert result.error is not None
    assert str(target) in result.error
    assert "UTF-8" in result.error
    assert "Traceback" not in caplog.text
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    assert target.read_bytes() == b"\xff\xfe\x00old"


# --- what the file is beside its bytes: its mode, its link ---


async def write(path: Path, content: str) -> ToolResult:
    runtime = Runtime(LocalHost(), sink=MemorySink())
    turn = runtime.start_turn("s1")
    result = await turn.request("Write", {"path": str(path), "content": content}).result()
    await turn.finish()
    return result


def umask() -> int:
    """Set and put back (this test's thread is the only one that creates files now): another
    way than the tool's, which reads it from /proc."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


async def change(tool: str, path: Path) -> ToolResult:
    """``old`` to ``new`` in ``path``: by Edit, or by Write of the whole changed text."""
    if tool == "Edit":
        return await edit(path, old="old", new="new")
    return await write(path, path.read_text().replace("old", "new"))


@pytest.mark.parametrize("mode", [0o755, 0o644, 0o600, 0o664], ids=oct)
@pytest.mark.parametrize("tool", ["Edit", "Write"])
async def test_a_changed_file_keeps_its_mode(tmp_path: Path, mode: int, tool: str) -> None:
    """Before: every file Edit or Write touched came back 0600 (the temporary file's mode): a
    script lost its x bit, a config its readers."""
    target = tmp_path / "run.sh"
    target.write_text("echo old\n")
    target.chmod(mode)
    result = await change(tool, target)
    assert result.outcome is Outcome.COMPLETED, result
    assert target.read_text() == "echo new\n"
    assert target.stat().st_mode & 0o7777 == mode


async def test_a_new_file_gets_the_mode_any_program_would_give_it(tmp_path: Path) -> None:
    target = tmp_path / "new.txt"
    result = await write(target, "hello\n")
    assert result.outcome is Outcome.COMPLETED, result
    assert target.stat().st_mode & 0o7777 == 0o666 & ~umask()


@pytest.mark.parametrize("tool", ["Edit", "Write"])
async def test_a_change_through_a_symlink_changes_its_target_and_keeps_the_link(
    tmp_path: Path, tool: str
) -> None:
    """Before: the link was replaced by a regular file holding the change, and the file it
    pointed to was left as it was."""
    real = tmp_path / "real.txt"
    real.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    result = await change(tool, link)
    assert result.outcome is Outcome.COMPLETED, result
    assert link.is_symlink()
    assert real.read_text() == "new\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may give a file to another user")
async def test_a_changed_file_keeps_its_owner(tmp_path: Path) -> None:
    """A runtime run as root editing a user's file: it stayed root's."""
    target = tmp_path / "theirs.sh"
    target.write_text("echo old\n")
    os.chown(target, 65534, 65534)
    target.chmod(0o4755)  # set-uid: a chown after the chmod would clear it
    result = await edit(target, old="old", new="new")
    assert result.outcome is Outcome.COMPLETED, result
    assert (target.stat().st_uid, target.stat().st_gid) == (65534, 65534)
    assert target.stat().st_mode & 0o7777 == 0o4755
