"""What the three adapters share: one session's current turn and open calls, and the events
they become.

An adapter reads records (one parsed JSON line at a time) and writes turnwatch events (design §3)
with the CLI's own session, turn and call ids. It keeps only what the event contract needs: ids,
tool names, timestamps, outcomes. Prompts, replies, tool arguments and outputs are read where a
record's meaning depends on them (an interrupt marker, a rejection) and never written, unless the
user opted in to arguments (``keep_args``).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar

from turnwatch import names
from turnwatch.integrations.agentlogs.classes import cli_tool_class
from turnwatch.runtime.events import Event
from turnwatch.runtime.model import Outcome, TurnwatchError

#: With ``keep_args``, an argument string is cut here: enough to recognise a command.
ARGS_CAP = 512

#: ``turn.settled``'s ``reason`` when a CLI wrote a new prompt while its log left the last turn
#: open (a log cut short, or a CLI version that writes no end marker).
NEXT_PROMPT = "next_prompt"


#: The event schema's longest id (session, turn, call, tool name).
MAX_ID = 256

#: Tools that wait for the user's answer whenever they run (a question, a plan to approve): one
#: open is a session waiting on its user. The names as the CLIs spell them: the recording peer's
#: list (Irrlicht, ``isUserBlockingTool``) and Codex's ``request_user_input``.
ASKS_USER = frozenset(
    {
        "AskUserQuestion",
        "ExitPlanMode",
        "question",
        "ask_user_question",
        "exit_plan_mode",
        "ask_user",
        "request_user_input",
    }
)
#: ``attrs.inferred`` of a wait read from a tool of :data:`ASKS_USER`.
USER_BLOCKING_TOOL = "user_blocking_tool"


def ident(value: Any) -> str | None:
    """A CLI's id as an event may carry it: a non-empty string; one over :data:`MAX_ID` is cut
    and suffixed with its hash (still unique, still the same on every read); else None."""
    if not isinstance(value, str) or not value:
        return None
    if len(value) <= MAX_ID:
        return value
    return value[:200] + "~" + hashlib.blake2b(value.encode(), digest_size=8).hexdigest()


def project_of(directory: str) -> str:
    """The SHA-256 (hex) of a working directory, as Gemini CLI's ``projectHash`` is made."""
    return hashlib.sha256(directory.encode()).hexdigest()


def when(stamp: Any) -> float | None:
    """Unix seconds of an ISO-8601 timestamp (``2026-05-14T21:37:13.049Z``), or None."""
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


class BadRecord(TurnwatchError, ValueError):
    """A record whose fields the adapter cannot read."""


class Translator:
    """One session file's records → turnwatch events. Subclasses read the records (``take``).

    :meth:`feed` returns the events each record made; :meth:`flush` those an end of input
    decides (a turn end an adapter holds until it is sure); :meth:`snapshot` and
    :meth:`restore` carry the state across a restart, so a follower resuming at an offset
    knows the turn and the calls in flight.
    """

    source: ClassVar[str]

    def __init__(self, *, log: str | None = None, keep_args: bool = False) -> None:
        self.log = log
        self.keep_args = keep_args
        self.session: str | None = None
        self.announced = False
        self.turn: str | None = None
        self.turn_open = False
        self.ts = 0.0  # the last record's time: records without one happen then
        self.calls: dict[str, str] = {}  # open calls of the current turn: id → tool
        #: Calls of the current turn waiting on a prompt the log does not hold (inferred): id →
        #: the rule that inferred it.
        self.waits: dict[str, str] = {}
        self.call_ts: dict[str, float] = {}  # when each open call was asked for
        self.unknown: Counter[str] = Counter()
        self._out: list[Event] = []

    # --- reading ---

    def feed(self, obj: Any) -> list[Event]:
        """The events one record makes (a record the adapter does not know is counted).

        Raises :class:`BadRecord` for a record of a known type whose fields have shapes the
        adapter cannot read (a CLI version that changed them): reported, never fatal.
        """
        self._out = []
        if not isinstance(obj, dict):
            self.unknown[type(obj).__name__] += 1
            return self._out
        try:
            self.take(obj)
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
            raise BadRecord(f"record not understood ({type(exc).__name__}: {exc})") from None
        return self._out

    def take(self, rec: dict[str, Any]) -> None:
        raise NotImplementedError

    def flush(self) -> list[Event]:
        """Events the end of the input decides; none by default."""
        return []

    def ripen(self, now: float) -> list[Event]:
        """Events the time a followed file has been quiet decides, at ``now`` (unix seconds):
        waits inferred from how long a call has been open (:meth:`infer`). Live only: a file
        read whole has no now to measure against."""
        self._out = []
        self.infer(now)
        return self._out

    def infer(self, now: float) -> None:
        """Infer the waits the open calls' age tells (none by default)."""

    def snapshot(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "announced": self.announced,
            "turn": self.turn,
            "turn_open": self.turn_open,
            "ts": self.ts,
            "calls": dict(self.calls),
            "waits": dict(self.waits),
            "call_ts": dict(self.call_ts),
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        self.session = state.get("session")
        self.announced = bool(state.get("announced"))
        self.turn = state.get("turn")
        self.turn_open = bool(state.get("turn_open"))
        self.ts = float(state.get("ts") or 0.0)
        self.calls = dict(state.get("calls") or {})
        self.waits = dict(state.get("waits") or {})
        self.call_ts = {str(k): float(v) for k, v in (state.get("call_ts") or {}).items()}

    def skip(self, what: str) -> None:
        """A record of a type this adapter does not know (or need): counted, never fatal."""
        self.unknown[what] += 1

    # --- writing ---

    def at(self, stamp: Any) -> float:
        """The record's time, or the last one seen (records without a timestamp)."""
        ts = when(stamp)
        if ts is not None:
            self.ts = ts
        return self.ts

    def emit(
        self,
        kind: str,
        ts: float,
        *,
        turn: str | None = None,
        call: str | None = None,
        tool: str | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> None:
        if self.session is None:
            return  # nothing can be said before the session is known
        self._out.append(Event(kind, self.session, ts, None, turn, call, tool, attrs or {}))

    def call_event(
        self, kind: str, ts: float, call: str, tool: str, attrs: Mapping[str, Any] | None = None
    ) -> None:
        """An event of one call of the current turn."""
        self.emit(kind, ts, turn=self.turn, call=call, tool=tool, attrs=attrs)

    def announce(
        self, ts: float, session: Any, version: Any = None, *, cwd: Any = None, project: Any = None
    ) -> None:
        """The session is known: ``runtime.started`` with the producer (no pid: a log has none)
        and its ``project``, the SHA-256 of the CLI's working directory (given, or of ``cwd``):
        how the watchdog finds the CLI's process without the ledger keeping a path."""
        session = ident(session)
        if session is None or (self.session == session and self.announced):
            return
        self.session, self.announced = session, True
        attrs: dict[str, Any] = {names.K_SOURCE: self.source}
        if isinstance(version, str):
            attrs[names.K_VERSION] = version
        if isinstance(cwd, str) and cwd:
            project = project_of(cwd)
        if isinstance(project, str) and project:
            attrs[names.K_PROJECT] = project
        if self.log is not None:
            attrs[names.K_LOG] = self.log
        self.emit(names.RUNTIME_STARTED, ts, attrs=attrs)

    def begin_turn(self, ts: float, turn: Any) -> None:
        turn = ident(turn)
        if turn is None or (self.turn_open and self.turn == turn):
            return
        if self.turn_open:
            self.end_turn(ts, Outcome.COMPLETED, reason=NEXT_PROMPT)
        self.turn, self.turn_open, self.calls, self.call_ts = turn, True, {}, {}
        self.emit(names.TURN_STARTED, ts, turn=turn)

    def end_turn(
        self,
        ts: float,
        outcome: Outcome,
        *,
        reason: str | None = None,
        duration_ms: Any = None,
    ) -> None:
        """``turn.settled`` then ``processing.cleared``: the CLI is ready for the next prompt.

        Calls still open stay open: the log never said they ended, and the watchdog looks at
        their processes (that is the field bug: turns recorded aborted while a tool lives on).
        """
        if not self.turn_open or self.turn is None:
            return
        # A prompt the log never held goes with its turn (a turn ends no other way while one is
        # open): its end is said before the settle, as the runtime cancels a pending permission.
        for call, rule in self.waits.items():
            tool = self.calls.get(call, "?")
            self.call_event(names.PERMISSION_CANCELLED, ts, call, tool, {names.K_INFERRED: rule})
        self.waits = {}
        attrs: dict[str, Any] = {names.K_OUTCOME: outcome.value}
        if reason is not None:
            attrs[names.K_REASON] = reason
        if isinstance(duration_ms, int | float):
            attrs[names.K_DURATION_MS] = duration_ms
        self.emit(names.TURN_SETTLED, ts, turn=self.turn, attrs=attrs)
        self.emit(names.PROCESSING_CLEARED, ts, turn=self.turn)
        self.turn_open = False

    def interrupt(self, ts: float, *, reason: str = "interrupted", duration_ms: Any = None) -> None:
        """The user's Esc or Ctrl-C, where the log marks it: the stop, and the turn it ended."""
        if not self.turn_open or self.turn is None:
            return
        self.emit(names.STOP_CLICKED, ts, turn=self.turn, attrs={names.K_SOURCE: self.source})
        self.end_turn(ts, Outcome.ABORTED, reason=reason, duration_ms=duration_ms)

    def call_started(
        self, ts: float, call: Any, tool: Any, *, args: Any = None, background: bool = False
    ) -> None:
        """The model asked for a tool and the CLI ran it (the logs do not tell the two apart)."""
        call, tool = ident(call), ident(tool) or "?"
        if call is None or call in self.calls or self.turn is None:
            return
        # A call written after its turn's end (Gemini CLI writes a call its cancel ended a
        # moment after "Request cancelled.") stays in that turn, which stays settled: the
        # fold reads its activity as after the settle, which it is.
        self.calls[call] = tool
        self.call_ts[call] = ts
        cls = cli_tool_class(self.source, tool)
        attrs: dict[str, Any] = {names.K_CLASS: cls.value}
        if background:
            attrs[names.K_BACKGROUND] = True
        started = dict(attrs)
        if self.keep_args and args is not None:
            attrs[names.K_ARGS] = _capped(args)
        self.call_event(names.TOOL_REQUESTED, ts, call, tool, attrs)
        self.call_event(names.TOOL_STARTED, ts, call, tool, started)
        if tool in ASKS_USER:
            self.wait_inferred(ts, call, USER_BLOCKING_TOOL)

    def wait_inferred(self, ts: float, call: str, rule: str) -> None:
        """The open ``call`` waits on its user, as ``rule`` infers from what the log holds (no
        CLI writes its prompt): ``permission.requested`` with ``attrs.inferred``, at ``ts``,
        when the prompt appeared. Its end follows the call's (granted once it ran, denied as the
        log says) or the turn's (cancelled)."""
        tool = self.calls.get(call)
        if tool is None or call in self.waits or self.turn is None or not self.turn_open:
            return  # a call its turn's end left open waits on no prompt: the prompt went with it
        self.waits[call] = rule
        self.call_event(names.PERMISSION_REQUESTED, ts, call, tool, {names.K_INFERRED: rule})

    def call_ended(self, ts: float, call: Any, outcome: Outcome) -> None:
        call = ident(call)
        tool = self.calls.pop(call, None) if call is not None else None
        if tool is None or self.turn is None:
            return  # a result for a call this reader never saw start (a file read from the middle)
        self.call_ts.pop(call, None)
        rule = self.waits.pop(call, None)
        if rule is not None and outcome is not Outcome.DENIED:
            # It ran, or was ended: its wait ended by an answer (or an Esc) the log does not hold.
            answer: dict[str, Any] = {names.K_INFERRED: rule}
            if outcome is Outcome.ABORTED:
                kind = names.PERMISSION_CANCELLED
            else:
                kind, answer[names.K_APPROVED] = names.PERMISSION_GRANTED, True
            self.call_event(kind, ts, call, tool, answer)
        elif outcome is Outcome.DENIED:
            # A denial means a prompt was shown; the logs write only its answer, so both are
            # recorded at the answer's time (the request once: an inferred one came first).
            if rule is None:
                self.call_event(names.PERMISSION_REQUESTED, ts, call, tool)
            self.call_event(names.PERMISSION_DENIED, ts, call, tool, {names.K_APPROVED: False})
        self.call_event(names.TOOL_FINISHED, ts, call, tool, {names.K_OUTCOME: outcome.value})


def _capped(args: Any) -> Any:
    """Arguments as the user opted to keep them, each string cut at :data:`ARGS_CAP`."""
    if isinstance(args, str):
        return args if len(args) <= ARGS_CAP else args[:ARGS_CAP] + "…"
    if isinstance(args, dict):
        return {str(k): _capped(v) for k, v in args.items()}
    if isinstance(args, list):
        return [_capped(v) for v in args[:32]]
    return args


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or the ``text`` of its blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict) and "text" in b)
    return ""
