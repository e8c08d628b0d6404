"""A lazy package names each public name once, as an explicit re-export under ``TYPE_CHECKING``
(what type checkers read); the import map, ``__all__`` and ``dir()`` are read from that same
block, so they cannot disagree with it."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("package", ["runtime", "tracing", "exporters"])
def test_a_lazy_packages_names_come_from_its_one_list(package: str) -> None:
    module = importlib.import_module(f"turnwatch.{package}")
    names = module.__all__
    assert len(names) >= 4
    assert names == dir(module)
    for name in names:
        assert getattr(module, name) is not None
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = module.nope


def test_star_import_and_a_type_checker_see_the_same_names(tmp_path: Path) -> None:
    user = tmp_path / "user.py"
    user.write_text(
        "from turnwatch.runtime import Runtime, StopSource\n"
        "from turnwatch.tracing import Ledger\n"
        "def f(rt: Runtime, led: Ledger) -> StopSource:\n"
        "    return StopSource.UI\n"
    )
    mypy = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(user)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert mypy.returncode == 0, mypy.stdout
    star: dict[str, object] = {}
    exec("from turnwatch.runtime import *", star)
    assert {"Runtime", "StopSource", "TurnwatchError"} <= set(star)
