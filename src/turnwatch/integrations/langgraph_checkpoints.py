"""A LangGraph thread's history after a stop: the calls its checkpoint leaves unanswered, found
(in a run, or in a SQLite checkpointer's file by the watchdog) and answered. Requires the
``langgraph`` extra.

A run that ends in its tools step without their answers (cancelled natively, or its process
killed) leaves the model's last message with tool calls no ``ToolMessage`` answers: the thread's
history is invalid (``INVALID_CHAT_HISTORY`` at the next model call, langgraph #6726) and a
resume runs those calls again. :func:`answer` writes each its ``ToolMessage``, as the tools step
would have; :class:`CheckpointFile` finds such threads in the file of
``langgraph-checkpoint-sqlite``, reading it only (``mode=ro``), and :func:`repair` answers one
through the application's own graph (its channels and reducers are what the write needs).
"""

from __future__ import annotations

import datetime
import pkgutil
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, BaseMessage, ToolCall, ToolMessage
from langgraph.prebuilt import ToolNode

from turnwatch.integrations.langgraph_checkpoint_file import CheckpointFileError, open_checkpoints
from turnwatch.integrations.wrappers import stopped_words
from turnwatch.runtime.model import Outcome

if TYPE_CHECKING:  # langgraph-checkpoint-sqlite: imported where a file is read, so that a run's
    # own repair (``answer``, StoppableGraph) needs only langgraph
    from langgraph.checkpoint.sqlite import SqliteSaver

__all__ = [
    "LEFT",
    "CheckpointFile",
    "CheckpointFileError",
    "Dangling",
    "answer",
    "load_graph",
    "recorded_words",
    "repair",
    "stopped_words",
]

#: What the model is told of a call a run left without its result (cancelled natively, or its
#: process killed in the tools step): whether it ran is not known.
LEFT = (
    "Not known: the run that made this call ended before its result was recorded; it may "
    "have run. It is not run again."
)
#: A call the ledger saw end, whose result the run that made it lost before writing it.
RAN = (
    "It ran to its end, but its result was lost with the run that made this call. "
    "It is not run again."
)
FAILED = "It failed; its error was lost with the run that made this call. It is not run again."


def recorded_words(outcome: str | None) -> str:
    """What the model is told of a left call whose end the ledger recorded as ``outcome`` (the
    ledger keeps no output): the stop's own words, else that it ran or failed, else :data:`LEFT`."""
    if outcome in (Outcome.DISCARDED, Outcome.REFUSED, Outcome.ABORTED):
        return stopped_words(Outcome(outcome))
    if outcome in (Outcome.COMPLETED, Outcome.COMPLETED_AFTER_STOP):
        return RAN
    if outcome == Outcome.FAILED:
        return FAILED
    return LEFT


def unanswered(messages: Iterable[Any], answers: Iterable[Any] = ()) -> list[ToolCall]:
    """Tool calls of the model's last message that no ``ToolMessage`` of ``messages`` (or of
    ``answers``: a checkpoint's pending writes) answers."""
    messages = list(messages)
    answered = {m.tool_call_id for m in [*messages, *answers] if isinstance(m, ToolMessage)}
    last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    return [c for c in (last.tool_calls if last else []) if c["id"] not in answered]


def _messages(values: Any) -> list[BaseMessage]:
    return list(values.get("messages", []) if isinstance(values, dict) else [])


async def answer(
    graph: Any,
    config: Any,
    known: Mapping[str, ToolMessage] | None = None,
    *,
    state: Any = None,
    words: str | Mapping[str, str] = "",
) -> list[str]:
    """Answer the calls of the thread's last model message its checkpoint holds no answer for:
    each its ``ToolMessage`` from ``known`` (what the run's stream carried), else ``words`` (one
    text, or one per call id; "not run" by default), written as the graph's tools step would
    have (its ``ToolNode`` the writer, so the model is next). The ids answered."""
    if config is None or not getattr(graph, "checkpointer", None):
        return []
    state = state or await graph.aget_state(config)
    missing = unanswered(_messages(state.values))
    if not missing:
        return []
    node = next(
        (n for n, v in graph.nodes.items() if isinstance(getattr(v, "bound", None), ToolNode)),
        None,
    )

    def said(call_id: str) -> str:
        text = words.get(call_id, LEFT) if isinstance(words, Mapping) else words
        return text or stopped_words(Outcome.REFUSED)

    replies = [
        (known or {}).get(str(c["id"]))
        or ToolMessage(
            content=said(str(c["id"])), name=c["name"], tool_call_id=c["id"] or "", status="error"
        )
        for c in missing
    ]
    await graph.aupdate_state(config, {"messages": replies}, as_node=node)
    return [str(c["id"]) for c in missing]


@dataclass(frozen=True)
class Dangling:
    """A thread whose latest checkpoint leaves tool calls of the model's last message
    unanswered, with no approval (interrupt) waiting on them."""

    thread: str
    checkpoint: str
    ts: float  # when the checkpoint was written (epoch seconds)
    calls: tuple[tuple[str, str], ...]  # (call id, tool name)


class CheckpointFile:
    """The threads of a ``langgraph-checkpoint-sqlite`` file left with unanswered calls.

    Read only. Each :meth:`scan` reads the checkpoints written since the last one (the
    table's rowid is the cursor), decodes only the latest of each thread they touch, and keeps
    only the threads found dangling: its cost and memory follow what changed and what is left,
    not the file's history."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._after = 0  # the last rowid read
        self._left: dict[str, Dangling] = {}  # thread → what its latest checkpoint left
        #: thread → its mark (:meth:`_mark`) when it was last judged dangling
        self._marks: dict[str, tuple[Any, ...]] = {}

    def scan(self) -> list[Dangling]:
        """Every thread the file leaves with unanswered calls, as it stands now."""
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = open_checkpoints(self.path)
        try:
            saver = SqliteSaver(conn)
            saver.is_setup = True  # its setup writes (WAL, CREATE TABLE): this reader never does
            top = conn.execute("SELECT max(rowid) FROM checkpoints").fetchone()[0] or 0
            if top < self._after:  # the file was replaced or vacuumed: read it whole again
                self._after, self._left, self._marks = 0, {}, {}
            touched = {
                r[0]
                for r in conn.execute(
                    "SELECT DISTINCT thread_id FROM checkpoints "
                    "WHERE checkpoint_ns = '' AND rowid > ? AND rowid <= ?",
                    (self._after, top),
                )
            }
            # A dangling thread is looked at again each scan (an interrupt or an answer may be
            # written as a pending write of the same checkpoint, or the thread deleted), but
            # decoded again only when its mark moved: two index seeks, not a checkpoint.
            for thread in touched | set(self._left):
                mark = self._mark(conn, thread)
                if thread not in touched and self._marks.get(thread) == mark:
                    continue
                found = self._judge(saver, thread)
                if found is None:
                    self._left.pop(thread, None)
                    self._marks.pop(thread, None)
                else:
                    self._left[thread], self._marks[thread] = found, mark
            self._after = top
        except sqlite3.Error as exc:
            raise CheckpointFileError(f"{self.path}: cannot read the checkpoints ({exc})") from None
        finally:
            conn.close()
        return sorted(self._left.values(), key=lambda d: d.ts)

    @staticmethod
    def _mark(conn: sqlite3.Connection, thread: str) -> tuple[Any, ...]:
        """What changes when anything is written to the thread's latest checkpoint: its id, and
        its pending writes' count and last rowid (a write replaced takes a new rowid)."""
        latest = conn.execute(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = '' "
            "ORDER BY checkpoint_id DESC LIMIT 1",
            (thread,),
        ).fetchone()
        if latest is None:
            return ()
        writes = conn.execute(
            "SELECT count(*), max(rowid) FROM writes "
            "WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id = ?",
            (thread, latest[0]),
        ).fetchone()
        return (latest[0], *writes)

    @staticmethod
    def _judge(saver: SqliteSaver, thread: str) -> Dangling | None:
        got = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
        if got is None:
            return None
        writes = [(channel, value) for _task, channel, value in got.pending_writes or ()]
        if any(channel == "__interrupt__" for channel, _v in writes):
            return None  # an approval waits on them: a permission, not a loss
        answers = [m for channel, v in writes if channel == "messages" for m in _listed(v)]
        missing = unanswered(_messages(got.checkpoint["channel_values"]), answers)
        if not missing:
            return None
        ts = datetime.datetime.fromisoformat(got.checkpoint["ts"]).timestamp()
        calls = tuple((str(c["id"]), str(c["name"])) for c in missing)
        return Dangling(thread, str(got.config["configurable"]["checkpoint_id"]), ts, calls)


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def load_graph(spec: str) -> Any:
    """The application's graph named ``module:attribute`` (a compiled graph, or a
    ``StateGraph`` to compile), imported as the application imports it."""
    if ":" not in spec:
        raise ValueError(f"{spec!r}: give the graph as module:attribute")
    try:
        graph = pkgutil.resolve_name(spec)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"{spec}: cannot import ({type(exc).__name__}: {exc})") from None
    if hasattr(graph, "compile") and not hasattr(graph, "aupdate_state"):
        graph = graph.compile()
    if not hasattr(graph, "aupdate_state"):
        raise ValueError(f"{spec}: not a LangGraph graph ({type(graph).__name__})")
    return graph


async def repair(graph: Any, path: Path, thread: str, words: Mapping[str, str]) -> list[str]:
    """Answer the thread's unanswered calls in the checkpointer file at ``path``, through
    ``graph`` (the application's, bound to that file): ``words`` per call id, :data:`LEFT` for
    the others. The ids answered (none if nothing was left by the time it wrote)."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        bound = graph.copy(update={"checkpointer": saver})
        config = {"configurable": {"thread_id": thread}}
        state = await bound.aget_state(config)
        if getattr(state, "interrupts", ()):
            return []  # an approval was asked for since the scan: a permission, not a loss
        return await answer(bound, config, state=state, words=words)
