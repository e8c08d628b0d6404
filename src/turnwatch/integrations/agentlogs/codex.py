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

Codex keeps its approval prompt on screen only. ``turn_context`` says the turn's
``approval_policy``: under ``untrusted`` every command asks first, under ``on-request`` a command
asking for escalated permissions does (``sandbox_permissions: require_escalated``). Such a call
still without output when the file goes quiet (its end, or no growth for a follower's quiet
time) is read as waiting on its user: ``permission.requested`` marked ``inferred``, at the call's
time. Under ``never`` nothing asks; under ``on-failure`` the ask follows a failure the rollout
does not show, so nothing is inferred.

A ``!command`` typed in the TUI is a task of its own (``task_started``, a ``<user_shell_command>``
message, ``task_complete``): a turn while it runs, as the TUI shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnwatch.integrations.agentlogs.base import Translator, ident, text_of
from turnwatch.runtime.events import Event
from turnwatch.runtime.model import Outcome

_CALLS = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
#: Records turnwatch reads nothing from: known, so not counted as unknown.
_QUIET = frozenset({"world_state", "compacted", "token_usage_record"})
_QUIET_ITEMS = frozenset({"message", "reasoning", "web_search_call", "ghost_snapshot"})
#: Calls that run a command (``exec``: the code-mode tool whose script runs them) or write files.
_COMMANDS = frozenset(
    {"exec", "exec_command", "shell", "shell_command", "local_shell", "apply_patch"}
)
#: ``attrs.inferred`` of a wait read from the turn's approval policy.
APPROVAL_POLICY = "approval_policy"


class Codex(Translator):
    source = "codex"

    def __init__(self, *, log: str | None = None, keep_args: bool = False) -> None:
        super().__init__(log=log, keep_args=keep_args)
        self.policy: str | None = None  # the current turn's approval_policy
        #: Open calls of the current turn its approval policy asks for: id → their time.
        self.gated: dict[str, float] = {}

    def flush(self) -> list[Event]:
        """The file went quiet: a command its policy asks for, still without output, waits."""
        self._out = []
        for call, ts in self.gated.items():
            if call in self.calls:
                self.wait_inferred(ts, call, APPROVAL_POLICY)
        return self._out

    def snapshot(self) -> dict[str, Any]:
        return {**super().snapshot(), "policy": self.policy, "gated": dict(self.gated)}

    def restore(self, state: Mapping[str, Any]) -> None:
        super().restore(state)
        policy = state.get("policy")
        self.policy = policy if isinstance(policy, str) else None
        self.gated = {str(k): float(v) for k, v in (state.get("gated") or {}).items()}

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
        elif kind == "turn_context":
            policy = p.get("approval_policy")
            self.policy = policy if isinstance(policy, str) else None
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
            self.gated = {}
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
            if call not in self.calls and _asks(self.policy, str(name), args):
                self.gated[call] = ts
            self.call_started(ts, call, str(name), args=args)
        elif what in _OUTPUTS and isinstance(call, str):
            self.gated.pop(call, None)
            self.call_ended(ts, call, _outcome(p.get("output")))
        elif what not in _QUIET_ITEMS:
            self.skip(f"response_item/{what}")


def _asks(policy: str | None, name: str, args: Any) -> bool:
    """Whether Codex shows an approval prompt before running this call, as its turn's
    ``approval_policy`` says (what Codex trusts without asking, a short list of read-only
    commands, is not told apart: the wait is marked inferred)."""
    if name not in _COMMANDS:
        return False
    if policy == "untrusted":
        return True
    # The model asks for escalation in the call's arguments (a JSON string, or the code-mode
    # script that passes them on).
    return policy == "on-request" and "require_escalated" in str(args)


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
