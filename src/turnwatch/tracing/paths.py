"""Where the ledger lives when no one says: importable without SQLite, for ``--help``."""

from __future__ import annotations

import os
from pathlib import Path


def default_path() -> Path:
    """``$TURNWATCH_LEDGER``, else ``$XDG_STATE_HOME/turnwatch/ledger.sqlite3``
    (``~/.local/state`` when ``XDG_STATE_HOME`` is unset)."""
    if os.environ.get("TURNWATCH_LEDGER"):
        return Path(os.environ["TURNWATCH_LEDGER"])
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "turnwatch" / "ledger.sqlite3"
