"""Deprecated: :mod:`turnwatch.integrations.wrappers` (renamed: ``runtime/calls.py`` is the
runtime's call). Kept through 0.2; importing a name from here warns."""

from __future__ import annotations

import warnings
from typing import Any

from turnwatch.integrations import wrappers

#: Old names whose new ones differ.
_RENAMED = {"class_of": "declared_class"}


def __getattr__(name: str) -> Any:
    new = _RENAMED.get(name, name)
    value = getattr(wrappers, new)  # AttributeError for a name neither module has
    warnings.warn(
        f"turnwatch.integrations.calls.{name} is deprecated: use "
        f"turnwatch.integrations.wrappers.{new}",
        DeprecationWarning,
        stacklevel=2,
    )
    return value
