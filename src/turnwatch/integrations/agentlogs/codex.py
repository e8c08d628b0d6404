"""Codex CLI rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

Each line is ``{"timestamp", "type", "payload"}``. What turnwatch reads:

- ``session_meta``: the session id and CLI version;
- ``event_msg/task_started``: a turn, with its ``turn_id``; ``task_complete``: its end;
- ``event_msg/turn_aborted``: an interrupt (``reason: interrupted``) or another abort, with how
  long the turn ran (``duration_ms``);
- ``response_item/function_call`` and ``custom_tool_call`` (and the older ``local_shell_call``):
  a tool call with its ``call_id``; ``*_output``: its result.

Codex does not log its commands' own begin and end (the rollout holds the model's items), so a
call runs from the model's request to its output. A call the interrupt left without an output
stays open: whether its command still runs is the watchdog's question, not the log's.
"""

from __future__ import annotations

from typing import Any

from turnwatch.integrations.agentlogs.base import Translator, ident, text_of
from turnwatch.runtime.model import Outcome

_CALLS = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
#: Records turnwatch reads nothing from: known, so not counted as unknown.
_QUIET = frozenset({"turn_context", "world_state", "compacted", "token_usage_record"})
_QUIET_ITEMS = frozenset({"message", "reasoning", "web_search_call", "ghost_snapshot"})


class Codex(Translator):
    source = "codex"

    def take(self, rec: dict[str, Any]) -> None:
        kind = rec.get("type")
        p = rec.get("payload")
        if not isinstance(p, dict):
            self.skip(str(kind))
            return
        ts = self.at(rec.get("timestamp"))
        if kind == "session_meta":
            sid = p.get("id") or p.get("session_id")
            if isinstance(sid, str) and sid:
                self.announce(ts, sid, p.get("cli_version"), cwd=p.get("cwd"))
        elif kind == "event_msg":
            self._event(ts, p)
        elif kind == "response_item":
            self._item(ts, p)
        elif kind not in _QUIET:
            self.skip(str(kind))

    def _event(self, ts: float, p: dict[str, Any]) -> None:
        what = p.get("type")
        turn = p.get("turn_id")
        if what == "task_started":
            self.begin_turn(ts, ident(turn) or f"{self.session}.turn@{ts}")
        elif what == "task_complete":
            if turn is None or turn == self.turn:
                # 0.171 ends a turn its model stream broke with task_complete and an error.
                outcome = Outcome.FAILED if p.get("error") else Outcome.COMPLETED
                self.end_turn(ts, outcome, duration_ms=p.get("duration_ms"))
        elif what == "turn_aborted":
            if turn is not None and turn != self.turn:
                return
            reason = str(p.get("reason") or "aborted")
            if reason == "interrupted":
                self.interrupt(ts, reason=reason, duration_ms=p.get("duration_ms"))
            else:  # replaced by a new turn, review ended…: ended, but nobody pressed Stop
                self.end_turn(ts, Outcome.ABORTED, reason=reason, duration_ms=p.get("duration_ms"))
        # user_message, agent_message, token_count, item_completed…: nothing for the stop path

    def _item(self, ts: float, p: dict[str, Any]) -> None:
        what = p.get("type")
        call = p.get("call_id") or p.get("id")
        if what in _CALLS and isinstance(call, str):
            name = p.get("name") or ("local_shell" if what == "local_shell_call" else "?")
            args = p.get("arguments", p.get("input", p.get("action")))
            self.call_started(ts, call, str(name), args=args)
        elif what in _OUTPUTS and isinstance(call, str):
            self.call_ended(ts, call, _outcome(p.get("output")))
        elif what not in _QUIET_ITEMS:
            self.skip(f"response_item/{what}")


def _outcome(output: Any) -> Outcome:
    """How a call ended, from the words Codex writes into its output."""
    if isinstance(output, dict):
        output = output.get("content", "")
    text = text_of(output).strip().lower()
    # "aborted", "aborted by user", or (0.171) "Wall time: 0.4 seconds\naborted by user".
    if text == "aborted" or "aborted by user" in text[:200]:
        return Outcome.ABORTED
    if "rejected by user" in text[:200]:
        return Outcome.DENIED
    return Outcome.COMPLETED
