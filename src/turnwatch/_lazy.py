"""Package namespaces that import on first use (PEP 562).

``turnwatch sessions`` reads a ledger; it must not pay for the MCP SDK, the host's tools or the
OpenTelemetry SDK because a package ``__init__`` re-exports them.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def exports(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``where`` maps each name to its module."""

    def getattr_(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next lookup is a plain attribute
        return value

    def dir_() -> list[str]:
        return sorted(where)

    return getattr_, dir_
