"""Claude Code transcripts (``~/.claude/projects/<project>/<session>.jsonl``).

Each line is one record with a ``type``. What turnwatch reads:

- ``user`` with the user's text: a turn (its ``promptId``, else the record's ``uuid``);
- ``assistant`` with ``tool_use`` blocks: tool calls with their ids; with ``stop_reason:
  end_turn`` and no tool call: the turn's end (so does ``system/turn_duration``);
- ``user`` with ``tool_result`` blocks: results; ``toolUseResult`` says ``interrupted``, a
  rejection (``User rejected tool use``), or a ``backgroundTaskId``;
- ``user`` whose text is ``[Request interrupted by user]`` or ``[Request interrupted by user for
  tool use]``: the interrupt;
- ``system/compact_boundary`` of a manual ``/compact``: the end of the turn before it;
- ``user`` whose text is the CLI's own wrapper of a ``!command`` typed in the TUI (``<bash-input>``,
  ``<bash-stdout>``…) or of a local command's output (``<local-command-stdout>``…): no turn. The
  command runs in the user's shell with no model, and no turn end follows to settle one.

Claude Code fires no hook on an interrupt and keeps its permission prompt on screen only: a
prompt waiting for the user is not in the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnwatch.integrations.agentlogs.base import Translator, text_of
from turnwatch.runtime.model import Outcome

INTERRUPTED = "[Request interrupted by user"
_REJECTED = "User rejected tool use"
_DECLINED = "The user doesn't want to proceed"
#: Records with nothing for the stop path.
_QUIET = frozenset(
    {
        "permission-mode",
        "file-history-snapshot",
        "attachment",
        "ai-title",
        "last-prompt",
        "queue-operation",
        "summary",
        "custom-title",
        "progress",
    }
)
_ENDS = frozenset({"end_turn"})
#: File edits Claude Code asks permission for unless its mode accepts them; they are fast (a
#: few seconds; ~16 s the longest the recording peer saw), so one open this long waits on its
#: prompt (the peer's threshold and rule, Irrlicht ``stalledEditToolThreshold``).
EDITS = frozenset({"edit", "write", "multiedit", "notebookedit"})
STALLED_S = 30.0
#: ``permissionMode``s in which an edit asks nothing.
_EDITS_ALLOWED = frozenset({"acceptEdits", "bypassPermissions"})
#: ``attrs.inferred`` of a wait read from an edit open past :data:`STALLED_S`.
OPEN_EDIT = "open_edit_tool"
#: The tags Claude Code wraps its own text in, never a prompt (its list, as 2.1.197 has it).
_LOCAL = tuple(
    f"<{tag}>"
    for tag in (
        "bash-input",
        "bash-stdout",
        "bash-stderr",
        "bash-exit-code",
        "local-command-stdout",
        "local-command-stderr",
        "local-command-caveat",
    )
)


class ClaudeCode(Translator):
    source = "claude-code"

    def __init__(self, *, log: str | None = None, keep_args: bool = False) -> None:
        super().__init__(log=log, keep_args=keep_args)
        self.mode: str | None = None  # the session's permissionMode, as last written

    def snapshot(self) -> dict[str, Any]:
        return {**super().snapshot(), "mode": self.mode}

    def restore(self, state: Mapping[str, Any]) -> None:
        super().restore(state)
        mode = state.get("mode")
        self.mode = mode if isinstance(mode, str) else None

    def infer(self, now: float) -> None:
        """An edit open past :data:`STALLED_S` waits on its permission prompt (live only)."""
        if self.mode in _EDITS_ALLOWED:
            return
        for call, tool in self.calls.items():
            since = self.call_ts.get(call)
            if tool.lower() in EDITS and since is not None and now - since >= STALLED_S:
                self.wait_inferred(since, call, OPEN_EDIT)

    def take(self, rec: dict[str, Any]) -> None:
        kind = rec.get("type")
        sid = rec.get("sessionId")
        ts = self.at(rec.get("timestamp"))
        mode = rec.get("permissionMode")
        if isinstance(mode, str):
            self.mode = mode
        if (
            isinstance(sid, str)
            and sid
            and sid != self.session
            and "cwd" in rec
            and not rec.get("isSidechain")
        ):
            # Announced with the first record that says where the CLI runs (the first lines,
            # permission-mode and the like, do not): the watchdog needs that to find it. A
            # subagent's own file (<session>/subagents/agent-*.jsonl: every record a sidechain,
            # with its parent's sessionId) announces nothing: its parent's Task call covers it,
            # and the session's file stays the parent's (the watchdog asks who holds it open).
            self.announce(ts, sid, rec.get("version"), cwd=rec.get("cwd"))
        if kind == "user":
            self._user(ts, rec)
        elif kind == "assistant":
            self._assistant(ts, rec)
        elif kind == "system":
            sub = rec.get("subtype")
            if sub == "turn_duration" and not self.calls:
                self.end_turn(ts, Outcome.COMPLETED, duration_ms=rec.get("durationMs"))
            elif sub == "compact_boundary" and _manual(rec.get("compactMetadata")):
                # A /compact replaced the context: the turn before it is over, even one a
                # lost result left open (its calls stay open: the watchdog looks at them).
                self.end_turn(ts, Outcome.COMPLETED, reason="compacted")
        elif kind not in _QUIET:
            self.skip(str(kind))

    def _user(self, ts: float, rec: dict[str, Any]) -> None:
        msg = rec.get("message")
        content = msg.get("content") if isinstance(msg, dict) else None
        blocks = content if isinstance(content, list) else []
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            for b in results:
                call = b.get("tool_use_id")
                if isinstance(call, str):
                    self.call_ended(ts, call, _outcome(b, rec.get("toolUseResult")))
            return
        text = text_of(content)
        if text.startswith(INTERRUPTED):
            self.interrupt(ts)
            return
        if rec.get("isMeta") or rec.get("isSidechain") or rec.get("isCompactSummary"):
            return  # the CLI's own injected text, or a subagent's: not the user's prompt
        if text.lstrip().startswith(_LOCAL):
            return  # a shell escape or a local command's output: the user's, with no model
        turn = rec.get("promptId") or rec.get("uuid")
        if isinstance(turn, str) and text:
            self.begin_turn(ts, turn)

    def _assistant(self, ts: float, rec: dict[str, Any]) -> None:
        if rec.get("isSidechain"):
            return  # a subagent's step: its parent's Task call covers it
        msg = rec.get("message")
        if not isinstance(msg, dict):
            return
        uses = [
            b
            for b in msg.get("content") or []
            if isinstance(b, dict) and b.get("type") == "tool_use"
        ]
        for b in uses:
            call, name, args = b.get("id"), b.get("name"), b.get("input")
            if isinstance(call, str) and isinstance(name, str):
                bg = isinstance(args, dict) and bool(args.get("run_in_background"))
                self.call_started(ts, call, name, args=args, background=bg)
        if not uses and msg.get("stop_reason") in _ENDS and not self.calls:
            self.end_turn(ts, Outcome.COMPLETED)


def _manual(meta: Any) -> bool:
    """A compaction the user asked for (``/compact``); one the CLI makes mid-turn goes on."""
    return isinstance(meta, dict) and meta.get("trigger") == "manual"


def _outcome(block: dict[str, Any], result: Any) -> Outcome:
    if isinstance(result, dict) and result.get("interrupted"):
        return Outcome.ABORTED
    if isinstance(result, str) and result.startswith(_REJECTED):
        return Outcome.DENIED
    text = text_of(block.get("content"))
    if text.startswith(_DECLINED):
        return Outcome.DENIED
    if text.startswith(INTERRUPTED):
        return Outcome.ABORTED
    return Outcome.FAILED if block.get("is_error") else Outcome.COMPLETED
