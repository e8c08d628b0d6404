"""Package namespaces that import on first use (PEP 562), each public name written once.

``turnwatch sessions`` reads a ledger; it must not pay for the MCP SDK, the host's tools or the
OpenTelemetry SDK because a package ``__init__`` re-exports them. A package lists its public
names once, as explicit re-exports under ``if TYPE_CHECKING:`` (``from m import A as A``: what
type checkers read); :func:`exports` reads that same block from the package's source on first
use, so the map the import needs and ``__all__`` can never disagree with it.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: ``from turnwatch.x import (A as A, B as B)`` or on one line, in the ``TYPE_CHECKING`` block.
_IMPORT = re.compile(r"^\s+from (turnwatch[\w.]*) import (\([^)]*\)|[^\n]+)", re.MULTILINE)


def _names(init: Path) -> dict[str, str]:
    """Each name the package's ``TYPE_CHECKING`` block re-exports, and its module."""
    source = init.read_text()
    block = source.split("if TYPE_CHECKING:", 1)[1].split("\n\n", 1)[0]
    where: dict[str, str] = {}
    for module, names in _IMPORT.findall(block):
        for item in names.strip("()").split(","):
            name = item.split(" as ")[-1].strip()
            if name:
                where[name] = module
    return where


def exports(package: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose ``TYPE_CHECKING`` block names its
    exports; ``__all__`` is served by the same ``__getattr__``."""
    found: dict[str, str] = {}

    def where() -> dict[str, str]:
        if not found:
            init = sys.modules[package].__file__
            assert init is not None
            found.update(_names(Path(init)))
        return found

    def getattr_(name: str) -> Any:
        if name == "__all__":
            return sorted(where())
        module = where().get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next lookup is a plain attribute
        return value

    def dir_() -> list[str]:
        return sorted(where())

    return getattr_, dir_
