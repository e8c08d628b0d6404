"""What the agent CLIs' files say of a user's waits and shell escapes, read as each CLI means it:
a permission wait inferred where no prompt is written (and marked so), its end, and a ``!cmd``
typed in the TUI.

The records are the real recordings' (``tests/data/agent-logs``), a few of them changed the way
the CLI writes the case (an answer that came after the recording ended, a tool that asks).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import turnwatch, wait_until
from tests.integrations.agent_arcs import DATA
from tests.integrations.test_agentlogs_follow import Harness, batch, rollout, unlogged
from turnwatch import names
from turnwatch.integrations.agentlogs import FORMATS
from turnwatch.runtime.events import Event
from turnwatch.testing import check_invariants
from turnwatch.tracing.arc import arc_of

GATED = next(DATA.glob("codex/scenarios/2-19_*/recordings/*/transcript.jsonl"))
GATED_CALL = "call_bt8adeXIWXS3UrYrNe5oLSiP"  # the `exec` left waiting on its approval
CLAUDE_ESCAPE = next(DATA.glob("claudecode/scenarios/2-15_*/recordings/*/transcript.jsonl"))
CLAUDE_TOOL = next(DATA.glob("claudecode/scenarios/2-2_*/recordings/*/transcript.jsonl"))


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def read(fmt: str, recs: list[dict[str, Any]], *, flush: bool = True) -> list[Event]:
    tr = FORMATS[fmt]()
    out: list[Event] = []
    for r in recs:
        out += tr.feed(r)
    return out + (tr.flush() if flush else [])


def waits(events: list[Event]) -> list[tuple[str, str | None, Any]]:
    return [
        (e.kind, e.call, e.attrs.get(names.K_INFERRED))
        for e in events
        if e.kind.startswith("permission.")
    ]


def quiet_since(path: Path, seconds: float) -> None:
    """``path`` last written ``seconds`` ago: what only quiet decides is decided on reading."""
    os.utime(path, (time.time() - seconds,) * 2)


def codex_after(rec: dict[str, Any], kind: str, **payload: Any) -> dict[str, Any]:
    """A Codex record written a moment after ``rec``."""
    return {"timestamp": "2026-08-17T22:41:30.000Z", "type": kind, "payload": payload}


def with_policy(recs: list[dict[str, Any]], policy: str) -> list[dict[str, Any]]:
    out = []
    for r in recs:
        if r["type"] == "turn_context":
            r = {**r, "payload": {**r["payload"], "approval_policy": policy}}
        out.append(r)
    return out


# --- Codex: the approval policy ---


def test_a_codex_command_its_policy_asks_for_waits_once_the_file_is_quiet() -> None:
    recs = records(GATED)
    while_written = read("codex", recs, flush=False)
    assert waits(while_written) == []  # the file may still grow: nothing inferred yet
    evs = read("codex", recs)
    assert waits(evs) == [(names.PERMISSION_REQUESTED, GATED_CALL, "approval_policy")]
    (asked,) = [e for e in evs if e.kind == names.PERMISSION_REQUESTED]
    (call,) = [e for e in evs if e.kind == names.TOOL_STARTED and e.call == GATED_CALL]
    assert asked.ts_unix == call.ts_unix  # dated when the prompt appeared: the call's time
    assert arc_of(evs).states == ["ready", "working", "waiting"]
    assert arc_of(evs).steps[-1].inferred == "approval_policy"


@pytest.mark.parametrize(
    ("policy", "escalated", "asks"),
    [
        ("untrusted", False, True),
        ("on-request", True, True),
        ("on-request", False, False),
        ("on-failure", True, False),
        ("never", True, False),
    ],
)
def test_only_a_policy_that_asks_infers_a_wait(policy: str, escalated: bool, asks: bool) -> None:
    recs = with_policy(records(GATED), policy)
    last = recs[-1]["payload"]
    script = str(last["input"])
    if escalated:
        script = script.replace("});", ',"sandbox_permissions":"require_escalated"});', 1)
    recs[-1] = {**recs[-1], "payload": {**last, "input": script}}
    got = waits(read("codex", recs))
    assert got == ([(names.PERMISSION_REQUESTED, GATED_CALL, "approval_policy")] if asks else [])


def test_the_output_that_follows_ends_the_wait_before_the_call() -> None:
    recs = records(GATED)
    output = {"type": "custom_tool_call_output", "call_id": GATED_CALL, "output": "hi"}
    done = {"type": "task_complete", "turn_id": recs[1]["payload"]["turn_id"]}
    evs = read("codex", recs) + read_more(recs, [output], [done])
    tail = [(e.kind, e.attrs.get(names.K_INFERRED)) for e in evs if e.call == GATED_CALL][-3:]
    assert tail == [
        (names.PERMISSION_REQUESTED, "approval_policy"),
        (names.PERMISSION_GRANTED, "approval_policy"),
        (names.TOOL_FINISHED, None),
    ]
    assert arc_of(evs).states == ["ready", "working", "waiting", "working", "ready"]
    assert check_invariants(evs) == []


def read_more(
    recs: list[dict[str, Any]], items: list[dict[str, Any]], msgs: list[dict[str, Any]]
) -> list[Event]:
    """The events the records after ``recs`` add, read on by one translator (its quiet flush
    between, as a follower's)."""
    tr = FORMATS["codex"]()
    for r in recs:
        tr.feed(r)
    tr.flush()
    out: list[Event] = []
    for p in items:
        out += tr.feed(codex_after(recs[-1], "response_item", **p))
    for p in msgs:
        out += tr.feed(codex_after(recs[-1], "event_msg", **p))
    return out + tr.flush()


def test_an_interrupt_at_the_prompt_cancels_the_wait_before_the_turn_settles() -> None:
    recs = records(GATED)
    turn = recs[1]["payload"]["turn_id"]
    aborted = {"type": "turn_aborted", "turn_id": turn, "reason": "interrupted"}
    evs = read("codex", recs) + read_more(recs, [], [aborted])
    order = [e.kind for e in evs][-5:]
    assert order == [
        names.PERMISSION_REQUESTED,
        names.STOP_CLICKED,
        names.PERMISSION_CANCELLED,
        names.TURN_SETTLED,
        names.PROCESSING_CLEARED,
    ]
    assert check_invariants(evs) == []  # never settled while a prompt could be answered
    arc = arc_of(evs)
    # The wait ends as the stop cancels it, the turn's end a moment later (here the same one:
    # the file dates both at the abort, and the arc keeps both as recorded).
    assert (arc.states, arc.stops) == (["ready", "working", "waiting", "working", "ready"], 1)
    assert arc.steps[-1].since == arc.steps[-2].since


def test_a_follower_restarted_between_the_wait_and_its_answer_ends_it(tmp_path: Path) -> None:
    """The wait, and the policy the reader learnt, live in the checkpoint: a restart neither
    forgets an open wait (the session waiting for ever) nor infers one twice."""
    lines = GATED.read_bytes().splitlines(keepends=True)
    turn = json.loads(lines[1])["payload"]["turn_id"]
    more = [
        codex_after(
            {}, "response_item", type="custom_tool_call_output", call_id=GATED_CALL, output="hi"
        ),
        codex_after({}, "event_msg", type="task_complete", turn_id=turn),
    ]
    path = rollout(tmp_path)
    store: dict[str, str] = {}
    events: list[Event] = []
    for cut in (10, len(lines), None):  # after turn_context; the whole file; the answer
        body = lines if cut is None else lines[:cut]
        extra = [json.dumps(r).encode() + b"\n" for r in more] if cut is None else []
        path.write_bytes(b"".join(body) + b"".join(extra))
        quiet_since(path, 60)  # the user took a minute: the run sees the file quiet
        h = Harness("codex", tmp_path, store)
        h.f.poll(final=True)
        h.f.close()
        events += h.events
    got = unlogged(events)
    assert waits(got) == [
        (names.PERMISSION_REQUESTED, GATED_CALL, "approval_policy"),
        (names.PERMISSION_GRANTED, GATED_CALL, "approval_policy"),
    ]
    assert arc_of(got).states[-1] == "ready"
    assert unlogged(events)[: len(batch(GATED))] == batch(GATED)


# --- a tool that always asks its user ---


def tool_use_at(recs: list[dict[str, Any]]) -> int:
    """Where the one assistant record with a tool call is."""
    (at,) = [
        i
        for i, r in enumerate(recs)
        if r.get("type") == "assistant"
        and any(b.get("type") == "tool_use" for b in r["message"]["content"])
    ]
    return at


def asking(recs: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
    """The recording with its one tool call renamed ``tool``."""
    out = []
    for r in recs:
        content = (r.get("message") or {}).get("content")
        if r.get("type") == "assistant" and isinstance(content, list):
            blocks = [{**b, "name": tool} if b.get("type") == "tool_use" else b for b in content]
            r = {**r, "message": {**r["message"], "content": blocks}}
        out.append(r)
    return out


def test_a_tool_that_asks_its_user_waits_while_it_is_open() -> None:
    recs = asking(records(CLAUDE_TOOL), "AskUserQuestion")
    (answer_at,) = [i for i, r in enumerate(recs) if r.get("toolUseResult") is not None]
    open_now = read("claude-code", recs[:answer_at], flush=False)
    assert waits(open_now)[-1][0::2] == (names.PERMISSION_REQUESTED, "user_blocking_tool")
    assert arc_of(open_now).states == ["ready", "working", "waiting"]
    evs = read("claude-code", recs)
    assert [w[0] for w in waits(evs)] == [names.PERMISSION_REQUESTED, names.PERMISSION_GRANTED]
    assert arc_of(evs).states == ["ready", "working", "waiting", "working", "ready"]
    assert check_invariants(evs) == []
    assert waits(read("claude-code", records(CLAUDE_TOOL))) == []  # Bash asks nothing here


# --- shell escapes ---


def test_a_claude_code_shell_escape_is_no_turn() -> None:
    """Claude Code writes a ``!cmd`` as its own ``<bash-input>``/``<bash-stdout>`` records, with
    no model reply: no turn (before, a turn that nothing ended: the session working for ever)."""
    recs = records(CLAUDE_ESCAPE)
    (first,) = [i for i, r in enumerate(recs) if r.get("promptId") and "!echo" in str(r)]
    prompt = recs[first]
    typed = "<bash-input>echo hello</bash-input>"
    bash_in = {**prompt, "message": {"role": "user", "content": typed}}
    bash_out = {
        **prompt,
        "uuid": "escape-output",
        "message": {
            "role": "user",
            "content": "<bash-stdout>hello</bash-stdout><bash-stderr></bash-stderr>",
        },
    }
    # The model's reply and its turn_duration go: a real escape has neither.
    reply = first + [r.get("type") for r in recs[first:]].index("system")
    escaped = [*recs[:first], bash_in, bash_out, *recs[reply + 1 :]]
    evs = read("claude-code", escaped)
    assert [e.kind for e in evs].count(names.TURN_STARTED) == 1  # the later prompt only
    assert arc_of(evs).states == ["ready", "working", "ready"]


def test_a_gemini_shell_escape_is_no_turn() -> None:
    path = next(DATA.glob("gemini-cli/scenarios/2-15_*/recordings/2026-06-13*/transcript.jsonl"))
    evs = read("gemini-cli", records(path))
    turns = [e for e in evs if e.kind == names.TURN_STARTED]
    assert len(turns) == 2  # the warmup and the final prompt; the escape between is none
    assert arc_of(evs).states == ["ready", "working", "ready", "working", "ready"]


# --- what explain and the page say of it ---


def test_explain_draws_the_arc_and_says_what_the_session_waits_for(tmp_path: Path) -> None:
    ledger = str(tmp_path / "l.sqlite3")
    assert turnwatch("ingest", str(GATED), "--ledger", ledger).returncode == 0
    session = records(GATED)[0]["payload"]["id"]
    text = turnwatch("explain", session, "--ledger", ledger)
    assert text.returncode == 0, text.stderr
    out = " ".join(text.stdout.replace("│", " ").split())  # the 80-column panel, unwrapped
    assert "States (0 stops)" in out
    assert "waiting permission.requested (inferred: approval_policy)" in out
    assert f"exec {GATED_CALL} (process) waits for its user to answer a permission prompt" in out
    assert "inferred (approval_policy): its agent CLI writes no prompt to its log" in out
    assert "it waits for its user to answer a permission prompt" in out  # nothing to recover
    data = json.loads(turnwatch("explain", session, "--json", "--ledger", ledger).stdout)
    assert [s["state"] for s in data["arc"]["steps"]] == ["ready", "working", "waiting"]
    assert data["arc"]["steps"][-1]["inferred"] == "approval_policy"
    assert (data["arc"]["stops"], data["arc"]["cut"]) == (0, False)


# --- compaction ---


@pytest.mark.parametrize(("trigger", "ends"), [("manual", True), ("auto", False)])
def test_a_manual_compact_ends_the_turn_before_it(trigger: str, ends: bool) -> None:
    """A ``/compact`` (Claude Code's ``compact_boundary``, ``trigger: manual``) replaces the
    context: a turn a lost result left open is over, its call left open for the watchdog. One
    the CLI makes mid-turn (``auto``) goes on."""
    recs = records(CLAUDE_TOOL)
    asked = tool_use_at(recs)
    boundary = {
        **{k: recs[asked][k] for k in ("sessionId", "cwd", "version", "timestamp")},
        "type": "system",
        "subtype": "compact_boundary",
        "content": "Conversation compacted",
        "compactMetadata": {"trigger": trigger, "preTokens": 20965, "durationMs": 15335},
    }
    evs = read("claude-code", [*recs[: asked + 1], boundary])
    settled = [e for e in evs if e.kind == names.TURN_SETTLED]
    assert [e.attrs.get(names.K_REASON) for e in settled] == (["compacted"] if ends else [])
    assert arc_of(evs).states[-1] == ("ready" if ends else "working")
    assert [e.kind for e in evs if e.kind.startswith("tool.")][-1] == names.TOOL_STARTED


# --- subagents ---


def test_a_subagents_own_file_says_nothing_of_its_parent_session() -> None:
    """Claude Code writes a subagent's steps to ``<session>/subagents/agent-<id>.jsonl``, every
    record a sidechain with its parent's ``sessionId``. Read, it announced the parent's session
    again with the subagent's file as its log, the file the watchdog asks the CLI to hold open."""
    parent = records(CLAUDE_TOOL)
    sub = [{**r, "isSidechain": True, "agentId": "a9df09b50d5f3ad98"} for r in parent]
    assert read("claude-code", sub) == []
    started = [e for e in read("claude-code", parent) if e.kind == names.RUNTIME_STARTED]
    assert len(started) == 1  # the parent's own file announces it, once


# --- an edit open too long (followed live) ---


def edit_left_open(mode: str) -> list[dict[str, Any]]:
    """The 2-2 recording up to its tool call, the call an ``Edit``, in ``permissionMode``."""
    recs = asking(records(CLAUDE_TOOL), "Edit")
    upto = recs[: tool_use_at(recs) + 1]
    return [{**r, "permissionMode": mode} if "permissionMode" in r else r for r in upto]


@pytest.mark.parametrize(("mode", "waits"), [("default", True), ("acceptEdits", False)])
def test_an_edit_open_past_the_peers_threshold_waits_on_its_prompt_when_followed(
    tmp_path: Path, mode: str, waits: bool
) -> None:
    """Followed live, an ``Edit`` open 30 s (the recording peer's rule: edits are fast, so it
    waits on its prompt) is an inferred wait, dated at the call; not where the session's
    permission mode accepts edits, and not when a file is read whole (no now to measure)."""
    recs = edit_left_open(mode)
    path = tmp_path / "proj" / "s.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    quiet_since(path, 90 * 86_400)  # written months ago
    h = Harness("claude-code", tmp_path)
    h.f.poll(final=True)
    h.f.close()
    got = waits_of(h.events)
    assert got == ([(names.PERMISSION_REQUESTED, "open_edit_tool")] if waits else [])
    if waits:  # dated when the prompt appeared: the call's time
        started = [e.ts_unix for e in h.events if e.kind == names.TOOL_STARTED]
        asked = [e.ts_unix for e in h.events if e.kind == names.PERMISSION_REQUESTED]
        assert asked == started
    assert waits_of(read("claude-code", recs)) == []  # read whole: nothing inferred


def waits_of(events: list[Event]) -> list[tuple[str, Any]]:
    return [(e.kind, e.attrs.get(names.K_INFERRED)) for e in events if e.kind.startswith("perm")]


def test_a_quiet_file_with_a_call_open_is_still_let_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asking an open call's age each poll must not keep a quiet file followed for ever: it is
    let go after its idle time like any other (its place and its calls in its checkpoint)."""
    from turnwatch.integrations.agentlogs import follow

    monkeypatch.setattr(follow, "QUIET_S", 0.05)
    monkeypatch.setattr(follow, "IDLE_S", 0.2)
    path = tmp_path / "proj" / "s.jsonl"
    path.parent.mkdir()
    recs = edit_left_open("acceptEdits")  # an edit open, nothing to infer
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    h = Harness("claude-code", tmp_path)
    h.f.poll()
    assert h.f.files[path].tr.calls  # the call is open

    def let_go() -> bool:
        h.f.poll()
        return not h.f.files

    wait_until(let_go, 5, "the quiet file let go")
    h.f.close()
