"""The built-in tools' arguments as an agent writes them: each checked before anything is
opened or started, refused naming the argument and its range, and what a tool returns bounded
and saying when it was cut (Read's limit, Grep's and Glob's counts).

Real files, real processes and real devices: ``/dev/zero`` never ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from turnwatch.runtime import LocalHost, MemorySink, Outcome, Runtime, ToolResult
from turnwatch.runtime.tools.files import READ_LIMIT_MAX


async def call(tool: str, args: dict[str, Any]) -> ToolResult:
    runtime = Runtime(LocalHost(), sink=MemorySink())
    turn = runtime.start_turn("s1")
    return await turn.request(tool, args).result()


@pytest.mark.parametrize(
    "limit",
    [
        pytest.param(-1, id="negative: read to the end, of /dev/zero for ever"),
        pytest.param(0, id="zero"),
        pytest.param(True, id="a bool"),
        pytest.param(READ_LIMIT_MAX + 1, id="over the most a Read takes"),
    ],
)
async def test_a_limit_out_of_range_is_refused_saying_the_range(limit: object) -> None:
    """Before: ``limit=-1`` read ``/dev/zero`` until the runtime's memory ran out (in a worker
    thread the stop cannot end: a Read is raced and discarded)."""
    result = await call("Read", {"path": "/dev/zero", "limit": limit})

    assert result.outcome is Outcome.FAILED, result
    assert result.error is not None
    assert "limit" in result.error
    assert f"{READ_LIMIT_MAX:,}" in result.error


async def test_a_read_cut_by_its_limit_says_so_and_cuts_no_character(tmp_path: Path) -> None:
    """Before: the first ``limit`` bytes, decoded as they came (a character cut in two was a
    U+FFFD the file does not hold), and nothing said the file went on."""
    path = tmp_path / "cjk.txt"
    path.write_text("日本語" * 1000)  # 9,000 bytes

    cut = await call("Read", {"path": str(path), "limit": 1000})  # inside the 334th character
    whole = await call("Read", {"path": str(path), "limit": 9000})
    roomy = await call("Read", {"path": str(path)})  # the default limit, 1 MiB

    text, _, note = cut.output.partition("\n[")
    assert text == ("日本語" * 1000)[:333]
    assert "\ufffd" not in cut.output
    assert "1,000 bytes" in note
    assert cut.data is not None
    assert cut.data["truncated"] is True
    assert whole.output == "日本語" * 1000
    assert whole.data is not None
    assert whole.data["truncated"] is False
    # How many bytes were read (it said the limit, read or not).
    assert (cut.data["bytes"], whole.data["bytes"]) == (1000, 9000)
    assert roomy.data == {"truncated": False, "bytes": 9000}


@pytest.mark.parametrize("max_matches", [0, -5, True])
async def test_grep_refuses_a_max_matches_that_is_not_a_count(
    tmp_path: Path, max_matches: object
) -> None:
    (tmp_path / "a.txt").write_text("needle\n")
    result = await call(
        "Grep", {"pattern": "needle", "path": str(tmp_path), "max_matches": max_matches}
    )

    assert result.outcome is Outcome.FAILED, result
    assert result.error is not None
    assert "max_matches" in result.error


async def test_grep_says_when_it_stopped_at_max_matches(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("needle\n" * 5)

    some = await call("Grep", {"pattern": "needle", "path": str(tmp_path), "max_matches": 3})
    every = await call("Grep", {"pattern": "needle", "path": str(tmp_path), "max_matches": 5})

    assert some.output.count("needle") == 3
    assert some.data is not None
    assert some.data["truncated"] is True
    assert every.data is not None
    assert every.data["truncated"] is False


async def test_glob_keeps_the_first_max_results_in_order_and_says_it_stopped(
    tmp_path: Path,
) -> None:
    """Before: every path was kept, ``**`` of a large tree (or of ``/``) into one string, and
    the worker a stop discards held all of it."""
    for i in range(50):
        (tmp_path / f"f{i:02}.txt").write_text("")

    some = await call("Glob", {"pattern": "*.txt", "path": str(tmp_path), "max_results": 10})
    every = await call("Glob", {"pattern": "*.txt", "path": str(tmp_path)})

    assert some.output.splitlines() == [str(tmp_path / f"f{i:02}.txt") for i in range(10)]
    assert some.data == {"count": 10, "truncated": True}
    assert len(every.output.splitlines()) == 50
    assert every.data == {"count": 50, "truncated": False}


@pytest.mark.parametrize(
    ("args", "named"),
    [
        pytest.param({"size": "abc"}, "'size'", id="size-text"),
        pytest.param({"size": -5}, "'size'", id="size-negative"),
        pytest.param({"size": True}, "'size'", id="size-bool"),
        pytest.param({"size": 100_000}, "'size'", id="size-10-gigapixels"),
        pytest.param({"steps": -1}, "'steps'", id="steps-negative"),
        pytest.param({"prompt": 5}, "'prompt'", id="prompt-a-number"),
    ],
)
async def test_generate_images_refuses_what_it_cannot_render(
    tmp_path: Path, args: dict[str, Any], named: str
) -> None:
    """Before: a ``size`` of text failed with Python's own words (and a traceback in the
    log), a negative one as "exit code 1", ``true`` rendered one pixel, 100,000 started a ten
    gigapixel render; a negative ``steps`` and a numeric prompt were taken."""
    out = tmp_path / "x.png"
    result = await call("GenerateImages", {"out": str(out), **args})

    assert result.outcome is Outcome.FAILED, result
    assert result.error is not None
    assert named in result.error
    assert not out.exists()


@pytest.mark.parametrize(
    ("tool", "args", "named"),
    [
        pytest.param("Read", {"path": "/etc\x00x"}, "'path'", id="read"),
        pytest.param("Glob", {"pattern": "*", "path": "/e\x00"}, "'path'", id="glob"),
        pytest.param("Grep", {"pattern": "x", "path": "/e\x00"}, "'path'", id="grep"),
        pytest.param("Write", {"path": "/tmp/a\x00b", "content": "x"}, "'path'", id="write"),
        pytest.param("Edit", {"path": "/tmp/a\x00b", "old": "x", "new": "y"}, "'path'", id="edit"),
        pytest.param("Bash", {"command": "echo a\x00b"}, "'command'", id="bash-command"),
        pytest.param("Bash", {"command": "pwd", "cwd": "/tmp\x00"}, "'cwd'", id="bash-cwd-nul"),
        pytest.param("Bash", {"command": "pwd", "cwd": 5}, "'cwd'", id="bash-cwd-a-number"),
        pytest.param("GenerateImages", {"out": "/tmp/a\x00.png"}, "'out'", id="image-out"),
    ],
)
async def test_a_name_no_file_or_process_can_have_is_refused_naming_the_argument(
    tool: str, args: dict[str, Any], named: str
) -> None:
    """Before: Python's "embedded null byte" with a traceback in the log; Glob said it found
    nothing; a Bash ``cwd`` that was not a string was passed over, and the command ran in the
    runtime's own directory."""
    result = await call(tool, args)

    assert result.outcome is Outcome.FAILED, result
    assert result.error is not None
    assert named in result.error


# --- Glob's and Grep's patterns and paths, as a model writes them ---


async def test_an_absolute_glob_pattern_is_read_from_its_root(tmp_path: Path) -> None:
    """A model often gives the whole path as the pattern. Before: Python's
    ``NotImplementedError: Non-relative patterns are unsupported``, with a traceback."""
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "b.log").write_text("b")
    result = await call("Glob", {"pattern": str(tmp_path / "*.txt")})
    assert result.outcome is Outcome.COMPLETED, result
    assert result.output == str(tmp_path / "a.txt")


@pytest.mark.parametrize(
    "pattern",
    [pytest.param("", id="empty"), pytest.param("a/**b", id="** inside a name")],
)
async def test_a_glob_pattern_python_cannot_take_is_refused_naming_it(
    pattern: str, caplog: pytest.LogCaptureFixture
) -> None:
    result = await call("Glob", {"pattern": pattern})
    assert result.outcome is Outcome.FAILED, result
    assert result.error is not None
    assert "'pattern'" in result.error
    assert not [r for r in caplog.records if r.levelname == "ERROR"]  # no traceback


@pytest.mark.parametrize("tool", ["Glob", "Grep"])
async def test_a_path_that_does_not_exist_is_said_not_searched(tool: str, tmp_path: Path) -> None:
    """Before: completed with nothing found (Grep counted the missing path as a file scanned),
    so the model read "no match" where nothing was there to look in."""
    missing = tmp_path / "no-such-dir"
    result = await call(tool, {"pattern": "*" if tool == "Glob" else "x", "path": str(missing)})
    assert result.outcome is Outcome.FAILED, result
    assert result.error is not None
    assert str(missing) in result.error
    assert "does not exist" in result.error
