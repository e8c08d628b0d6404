"""A ``langgraph-checkpoint-sqlite`` file opened to be read: read only, and checked to be one.

Apart from :mod:`turnwatch.integrations.langgraph_checkpoints`, which reads its checkpoints
with LangGraph's own saver, so that a path that names no such file is said at once: importing
LangGraph and langchain-core takes about two seconds before anything is read.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from turnwatch.runtime.model import TurnwatchError

__all__ = ["CheckpointFileError", "open_checkpoints"]


class CheckpointFileError(TurnwatchError, ValueError):
    """The file is not a LangGraph SQLite checkpointer's that can be read."""


def open_checkpoints(path: Path) -> sqlite3.Connection:
    """``path`` opened read only (``mode=ro``: this never writes, not even its WAL setting),
    once it is known to hold a checkpointer's tables."""
    if not path.is_file():
        raise CheckpointFileError(f"{path}: no such file")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.Error as exc:
        raise CheckpointFileError(f"{path}: not an SQLite file ({exc})") from None
    if not {"checkpoints", "writes"} <= have:
        conn.close()
        raise CheckpointFileError(
            f"{path}: not a LangGraph SQLite checkpointer's file (no checkpoints table)"
        )
    return conn
