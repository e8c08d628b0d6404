"""A ledger a command cannot use is one line and exit 2, never a traceback: a read-only volume
(a real tmpfs remounted read-only), a directory, a corrupt file; and a picture asked for in a
folder that is not there. The read-only ledger says it cannot be written, not that it cannot be
read, and the commands that only look still read it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import one_line_exit_2, turnwatch
from tests.tracing.test_ledger_faults import small_fs  # noqa: F401 - the fixture
from turnwatch import names
from turnwatch.runtime.events import now_event
from turnwatch.tracing.ledger import Ledger


@pytest.fixture
def read_only_ledger(small_fs: Path) -> Path:  # noqa: F811 - the fixture
    path = small_fs / "ledger.sqlite3"
    ledger = Ledger(path)
    ledger.append(now_event(names.TURN_STARTED, "s", turn="t"))
    ledger.close()
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["recover", "s", "--yes"],
        ["watch", "--once", "--recover"],
        ["demo", "--grace", "0.5"],
    ],
    ids=" ".join,
)
def test_a_read_only_ledger_is_one_line_for_a_command_that_writes(
    read_only_ledger: Path, argv: list[str]
) -> None:
    result = turnwatch(*argv, "--ledger", str(read_only_ledger), timeout=60)
    one_line_exit_2(result, str(read_only_ledger), "cannot write here (read-only file system)")


def test_a_read_only_ledger_is_still_read_by_the_commands_that_look(
    read_only_ledger: Path,
) -> None:
    for argv in (["sessions"], ["explain", "s"]):
        result = turnwatch(*argv, "--ledger", str(read_only_ledger))
        assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("what", ["directory", "corrupt"])
def test_demo_on_a_ledger_that_is_no_ledger_is_one_line(tmp_path: Path, what: str) -> None:
    path = tmp_path / "ledger"
    if what == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"not a database at all\n" * 100)
    result = turnwatch("demo", "--grace", "0.5", "--ledger", str(path), timeout=60)
    one_line_exit_2(result, str(path))


def test_explain_svg_into_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    ledger.append(now_event(names.TURN_STARTED, "s", turn="t"))
    ledger.close()
    svg = tmp_path / "no" / "such" / "folder" / "a.svg"
    result = turnwatch("explain", "s", "--ledger", str(path), "--svg", str(svg))
    one_line_exit_2(result, "--svg", "cannot write")
