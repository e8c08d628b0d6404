"""The watchdog's reader of a LangGraph SQLite checkpointer's file (``CheckpointFile``), on a real
file: what it finds, and that a scan decodes only what changed since the last one — a file of
many dangling threads costs two index seeks a thread per scan, not a checkpoint each (#32, #31).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.prebuilt import ToolNode

from tests.integrations.lg_graphs import Scripted, agent_graph
from turnwatch.integrations.langgraph_checkpoints import CheckpointFile


@tool
def look() -> str:
    """a read"""
    return "found"


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[SqliteSaver]:
    conn = sqlite3.connect(tmp_path / "ck.sqlite3", check_same_thread=False)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()


def _graph(saver: SqliteSaver) -> Any:
    return agent_graph(ToolNode([look]), Scripted(messages=iter([])), saver)


def _left(graph: Any, thread: str) -> None:
    """The thread as a run left it in its tools step: the model's call, no answer."""
    ask = AIMessage(content="", tool_calls=[{"id": f"r-{thread}", "name": "look", "args": {}}])
    graph.update_state({"configurable": {"thread_id": thread}}, {"messages": [ask]}, "agent")


def test_a_scan_decodes_only_the_threads_written_to_since_the_last(
    saver: SqliteSaver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = _graph(saver)
    for i in range(20):
        _left(graph, f"t{i}")
    judged: list[str] = []
    judge = CheckpointFile._judge  # noqa: SLF001 - counted, not replaced

    def counted(s: SqliteSaver, thread: str) -> Any:
        judged.append(thread)
        return judge(s, thread)

    monkeypatch.setattr(CheckpointFile, "_judge", staticmethod(counted))
    reader = CheckpointFile(tmp_path / "ck.sqlite3")
    assert len(reader.scan()) == 20
    assert len(judged) == 20
    judged.clear()
    assert len(reader.scan()) == 20  # nothing written: the same findings, nothing decoded
    assert judged == []

    # An answer written as a pending write of the same checkpoint (no new checkpoint row):
    # its thread, and only it, is decoded again, and is no longer dangling.
    cfg: RunnableConfig = {"configurable": {"thread_id": "t3"}}
    latest = saver.get_tuple(cfg)
    assert latest is not None
    saver.put_writes(
        latest.config, [("messages", [ToolMessage("found", tool_call_id="r-t3")])], "task-1"
    )
    found = reader.scan()
    assert judged == ["t3"]
    assert sorted(d.thread for d in found) == sorted(f"t{i}" for i in range(20) if i != 3)

    # A deleted thread is dropped; a new one found; the rest not decoded again.
    judged.clear()
    saver.delete_thread("t5")
    _left(graph, "t20")
    found = reader.scan()
    assert sorted(judged) == ["t20", "t5"]
    assert {d.thread for d in found} == {f"t{i}" for i in range(21)} - {"t3", "t5"}
