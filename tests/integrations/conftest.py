"""Fixtures the integration tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(params=["memory", "sqlite"])
async def checkpointer(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """LangGraph's in-memory checkpointer, and its SQLite one (a real file). (Imported here:
    the other frameworks' tests run without LangGraph.)"""
    if request.param == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver()
        return
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite3")) as saver:
        yield saver
