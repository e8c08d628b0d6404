"""Gemini CLI chat files (``~/.gemini/tmp/<project>/chats/session-*.jsonl``).

The first line is the session (``sessionId``, ``projectHash``, ``startTime``); then message
records ``{id, timestamp, type: user|gemini|info|error, content, toolCalls?}`` and ``{"$set": …}``
patches. A message is written again, whole, under the same id when it changes: the model's
reply first, then the same reply with its ``toolCalls``. A tool call is written only once it has
completed or was cancelled (``status``: ``success``, ``error``, ``cancelled``), so a command still
running is not in the file.

- ``user`` with text: a turn (the record's ``id``); with only ``functionResponse`` parts, the
  tool results going back to the model (the same turn);
- ``gemini`` without tool calls: the turn's end, held until the next record shows the reply
  was not rewritten with tool calls;
- ``info`` ``Request cancelled.``: the interrupt; ``error``: the turn failed;
- ``user`` text opening ``I ran the following shell command:``: a ``!command`` typed in the TUI,
  run in a local shell with no model and written as this preamble for the model's history. No
  turn: no reply follows to end one.

A prompt cancelled before the model answered is written after its cancel (0.61 writes the
``info`` first, then the ``user`` record): a cancel with no turn open is held, and the prompt
right after it is the turn it stopped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnwatch.integrations.agentlogs.base import Translator, text_of, when
from turnwatch.runtime.events import Event
from turnwatch.runtime.model import Outcome

CANCELLED = "Request cancelled."
#: How 0.61 writes a shell escape into the chat (``addShellCommandToGeminiHistory``).
SHELL_ESCAPE = "I ran the following shell command:"
_STATUS = {
    "success": Outcome.COMPLETED,
    "error": Outcome.FAILED,
    "cancelled": Outcome.ABORTED,
}


class GeminiCli(Translator):
    source = "gemini-cli"

    def __init__(self, *, log: str | None = None, keep_args: bool = False) -> None:
        super().__init__(log=log, keep_args=keep_args)
        #: A reply without tool calls: (its id, its time). The turn ends there unless the same
        #: reply comes back with tool calls.
        self.ending: tuple[str, float] | None = None
        #: A cancel that came before its prompt was written: its time.
        self.cancelled: float | None = None
        #: Calls of this turn that ended: a rewritten reply repeats them.
        self.seen: set[str] = set()

    def take(self, rec: dict[str, Any]) -> None:
        if "$set" in rec:
            return  # patches of the session's metadata
        kind = rec.get("type")
        if kind is None and "sessionId" in rec:
            sid = rec["sessionId"]
            if isinstance(sid, str) and sid:
                self.announce(self.at(rec.get("startTime")), sid, project=rec.get("projectHash"))
            return
        ts = self.at(rec.get("timestamp"))
        rid = rec.get("id")
        if self.ending is not None and not (kind == "gemini" and rid == self.ending[0]):
            self._end_pending()
        cancelled, self.cancelled = self.cancelled, None
        if kind == "user":
            self._user(ts, rec, rid)
            if cancelled is not None and self.turn_open and self.turn == rid:
                self.interrupt(ts, reason="cancelled")
        elif kind == "gemini":
            self._reply(ts, rec, rid)
        elif kind == "info":
            if str(rec.get("content", "")).startswith(CANCELLED):
                if self.turn_open:
                    self.interrupt(ts, reason="cancelled")
                else:
                    self.cancelled = ts
        elif kind == "error":
            self.end_turn(ts, Outcome.FAILED)
        else:
            self.skip(str(kind))

    def flush(self) -> list[Event]:
        self._out = []
        self._end_pending()
        return self._out

    def snapshot(self) -> dict[str, Any]:
        return {
            **super().snapshot(),
            "ending": self.ending,
            "seen": sorted(self.seen),
            "cancelled": self.cancelled,
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        super().restore(state)
        ending = state.get("ending")
        self.ending = (str(ending[0]), float(ending[1])) if ending else None
        self.seen = set(state.get("seen") or ())
        self.cancelled = state.get("cancelled")

    def _end_pending(self) -> None:
        if self.ending is not None:
            _rid, ts = self.ending
            self.ending = None
            self.end_turn(ts, Outcome.COMPLETED)

    def _user(self, ts: float, rec: dict[str, Any], rid: Any) -> None:
        text = text_of(rec.get("content")).strip()
        if not text or not isinstance(rid, str):
            return  # function responses: the turn goes on
        if text.startswith(SHELL_ESCAPE):
            return  # a shell escape: the user's command, no model turn
        self.seen = set()
        self.begin_turn(ts, rid)

    def _reply(self, ts: float, rec: dict[str, Any], rid: Any) -> None:
        calls = rec.get("toolCalls")
        if not calls:
            # A reply with text and no tool calls ends the turn, once the next record shows it
            # was not rewritten with its tool calls. One without text is the model turning to
            # its tools: 0.61 writes it before it runs them, then again with them when done.
            if isinstance(rid, str) and not self.calls and text_of(rec.get("content")).strip():
                self.ending = (rid, ts)
            return
        self.ending = None
        for c in calls if isinstance(calls, list) else []:
            if not isinstance(c, dict) or not isinstance(c.get("id"), str):
                continue
            call, name = c["id"], str(c.get("name") or "?")
            if call in self.seen:
                continue  # ended already: a rewritten reply repeats it
            args = c.get("args")
            bg = isinstance(args, dict) and bool(args.get("is_background"))
            self.call_started(ts, call, name, args=args, background=bg)
            outcome = _STATUS.get(str(c.get("status")))
            if outcome is not None:
                done = when(c.get("timestamp"))
                self.call_ended(max(done or ts, ts), call, outcome)
                self.seen.add(call)
