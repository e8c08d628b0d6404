"""The agent CLIs' session files read as turnwatch events: the real recordings, their peer's
expected arcs, privacy, and bad input."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import turnwatch
from tests.integrations import agent_arcs
from turnwatch import names
from turnwatch.integrations.agentlogs import (
    FORMATS,
    NotASessionFile,
    Report,
    cli_tool_class,
    read_file,
)
from turnwatch.integrations.agentlogs.base import BadRecord
from turnwatch.integrations.agentlogs.reader import parse
from turnwatch.runtime.events import Event
from turnwatch.runtime.fold import Fold
from turnwatch.runtime.model import ToolClass
from turnwatch.tracing.ingest import validator

DATA = agent_arcs.DATA


def one(pattern: str) -> Path:
    (path,) = DATA.glob(pattern + "/recordings/*/transcript.jsonl")
    return path


def events_of(path: Path, **kw: object) -> list[Event]:
    out: list[Event] = []
    read_file(path, out.append, **kw)  # type: ignore[arg-type]
    return out


def kinds(evs: list[Event]) -> list[str]:
    return [e.kind for e in evs]


def test_every_recording_agrees_with_its_arc_or_the_readme_says_why(tmp_path: Path) -> None:
    """Whole arcs and their stops, each recording against its scenario's expected arc (a
    regression, which has none, against the peer's own replay)."""
    rows = agent_arcs.measure(tmp_path / "arcs.sqlite3")
    assert len(rows) == 25
    differs = {a.key for a, got in rows if agent_arcs.agrees(a, got) is False}
    assert differs == set(agent_arcs.EXPLAINED)  # every difference explained, none stale
    off_replay = {a.key for a, got in rows if a.expected is None and got.states != a.replayed}
    assert off_replay == set(agent_arcs.AGAINST_REPLAY)
    assert agent_arcs.readme_table() == agent_arcs.table(rows)


def test_a_codex_interrupt_is_a_stop_and_an_aborted_turn_with_its_duration() -> None:
    evs = events_of(one("codex/scenarios/2-20_interrupted-turn"))
    assert kinds(evs) == [
        names.RUNTIME_STARTED,
        names.TURN_STARTED,
        names.STOP_CLICKED,
        names.TURN_SETTLED,
        names.PROCESSING_CLEARED,
        names.TURN_STARTED,
        names.TURN_SETTLED,
        names.PROCESSING_CLEARED,
    ]
    started = evs[0].attrs
    assert started[names.K_SOURCE] == "codex"
    assert started[names.K_VERSION] == "0.130.0"
    assert evs[2].attrs[names.K_SOURCE] == "codex"
    assert evs[3].attrs == {
        names.K_OUTCOME: "aborted",
        names.K_REASON: "interrupted",
        names.K_DURATION_MS: 4020,
    }
    assert evs[1].turn == evs[3].turn == "019e286c-172c-7002-84be-55bbaf847453"
    assert evs[6].attrs[names.K_OUTCOME] == "completed"


def test_codex_calls_keep_their_ids_and_classes() -> None:
    evs = events_of(one("codex/scenarios/2-6_long-agentic-session-stress"))
    requested = [e for e in evs if e.kind == names.TOOL_REQUESTED]
    finished = [e for e in evs if e.kind == names.TOOL_FINISHED]
    assert len(requested) == len(finished) == 10
    assert {e.call for e in requested} == {e.call for e in finished}
    assert requested[0].call == "call_IWLVJS4pCPjMXiUwzJXaMgMU"
    assert {e.tool for e in requested} == {"exec_command"}
    assert {e.attrs[names.K_CLASS] for e in requested} == {"process"}


def test_claude_code_denial_and_both_interrupt_markers() -> None:
    evs = events_of(one("claudecode/regressions/07-tool-denial-and-esc-db57d2ab"))
    denied = [e for e in evs if e.kind == names.PERMISSION_DENIED]
    assert [e.call for e in denied] == ["toolu_01FUU3kHfh1aksNtQQSYSuse"]
    asked = [e for e in evs if e.kind == names.PERMISSION_REQUESTED]
    assert [(e.call, e.ts_unix) for e in asked] == [(denied[0].call, denied[0].ts_unix)]
    fin = {e.call: e.attrs[names.K_OUTCOME] for e in evs if e.kind == names.TOOL_FINISHED}
    assert fin == {
        "toolu_01FUU3kHfh1aksNtQQSYSuse": "denied",
        "toolu_01TKbspBht6hZjtqeJfuABDe": "completed",
    }
    stops = [e for e in evs if e.kind == names.STOP_CLICKED]
    settled = [e.attrs[names.K_OUTCOME] for e in evs if e.kind == names.TURN_SETTLED]
    # "for tool use" after the denial, then Esc during the essay; the sleep turn completed.
    assert len(stops) == 2
    assert settled == ["aborted", "completed", "aborted"]
    # The last turn's reply never got its stop_reason: the file leaves that turn working.
    assert kinds(evs)[-1] == names.TURN_STARTED
    fold = Fold()
    fold.feed(evs)
    (s,) = fold.sessions.values()
    assert s.processing == 1
    assert s.settled_ts is None


def test_background_calls_are_marked_and_classed_by_the_table() -> None:
    evs = events_of(one("claudecode/scenarios/3-3_background-process"))
    (bash,) = [e for e in evs if e.kind == names.TOOL_STARTED and e.tool == "Bash"]
    assert bash.attrs == {names.K_CLASS: "process", names.K_BACKGROUND: True}
    gem = events_of(one("gemini-cli/scenarios/3-3_background-process"))
    (shell,) = [e for e in gem if e.kind == names.TOOL_STARTED]
    assert shell.tool == "run_shell_command"
    assert shell.attrs[names.K_BACKGROUND] is True
    assert cli_tool_class("claude-code", "Grep") is ToolClass.READ_ONLY
    assert cli_tool_class("gemini-cli", "write_file") is ToolClass.MUTATING
    assert cli_tool_class("codex", "mcp__github__create_issue") is ToolClass.EXTENSION


def test_a_gemini_reply_rewritten_with_its_tool_calls_is_one_call_and_one_turn_end() -> None:
    evs = events_of(one("gemini-cli/scenarios/2-2_auto-executed-tool-call"))
    assert kinds(evs).count(names.TOOL_REQUESTED) == 1
    assert kinds(evs).count(names.TURN_SETTLED) == 1
    # The turn ends at the final reply, after the call, not at the reply the CLI rewrote.
    settle = next(e for e in evs if e.kind == names.TURN_SETTLED)
    finish = next(e for e in evs if e.kind == names.TOOL_FINISHED)
    assert settle.ts_unix > finish.ts_unix


def test_a_gemini_cancel_written_before_its_prompt_stops_that_prompt() -> None:
    evs = events_of(one("gemini-cli/scenarios/2-20_user-esc-interrupt"))
    stop = next(e for e in evs if e.kind == names.STOP_CLICKED)
    assert stop.turn == "afa3461f-e54d-4bca-bb9a-03037f279fb3"  # "Count slowly…"
    settled = [(e.turn, e.attrs[names.K_OUTCOME]) for e in evs if e.kind == names.TURN_SETTLED]
    assert settled[0] == (stop.turn, "aborted")
    assert settled[-1][1] == "completed"


def ledger_text(path: Path) -> str:
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT * FROM events").fetchall()
    conn.close()
    return "\n".join(map(str, rows))


SECRETS = (
    "Write a long detailed essay",  # a prompt
    "Count slowly from 1 to 100",
    "sleep 30 && echo done",  # a command
    "printf %s hi > hello.txt",
    "Command running in background with ID",  # an output
    "The Quiet Sovereignty of Cats",  # a reply
)


def test_the_ledger_keeps_no_prompt_command_or_output_unless_asked(tmp_path: Path) -> None:
    files = [str(a.transcript) for a in agent_arcs.arcs()]
    plain, kept = tmp_path / "plain.sqlite3", tmp_path / "kept.sqlite3"
    assert turnwatch("ingest", "--ledger", str(plain), *files).returncode == 0
    text = ledger_text(plain)
    assert "toolu_01TKbspBht6hZjtqeJfuABDe" in text  # ids are kept
    assert [s for s in SECRETS if s in text] == []
    assert turnwatch("ingest", "--keep-args", "--ledger", str(kept), *files).returncode == 0
    text = ledger_text(kept)
    # Arguments only: the command is there, prompts, replies and outputs are not.
    assert "sleep 30 && echo done" in text
    assert "printf %s hi > hello.txt" in text
    assert [s for s in SECRETS if s in text] == [
        "sleep 30 && echo done",
        "printf %s hi > hello.txt",
    ]


def test_bad_lines_are_reported_by_file_and_line_and_good_records_kept(tmp_path: Path) -> None:
    good = one("codex/scenarios/2-20_interrupted-turn").read_bytes().splitlines(keepends=True)
    bad = tmp_path / "rollout-bad.jsonl"
    bad.write_bytes(
        b"".join(good[:5])
        + b'{"timestamp": "2026-05-14T21:37:13.1Z", "type": "event_msg", "payl\n'  # cut short
        + b'{"type": "event_msg", "payload": {"type": "x\xff"}}\n'  # not UTF-8
        + b'{"timestamp": "2026-05-14T21:37:14Z", "type": "brand_new_record", "payload": {}}\n'
        + b"".join(good[5:])
        + good[-1][:40]  # a last line still being written
    )
    report = Report()
    evs: list[Event] = []
    read_file(bad, evs.append, report=report)
    assert [(p.lineno, p.reason.split(":")[0]) for p in report.problems] == [
        (6, "not JSON"),
        (7, "not UTF-8"),
        (24, "truncated"),
    ]
    assert str(report.problems[0]).startswith(f"{bad}:6: not JSON")
    assert report.unknown == {"brand_new_record": 1}
    assert kinds(evs) == kinds(events_of(one("codex/scenarios/2-20_interrupted-turn")))
    result = turnwatch("ingest", str(bad), "--ledger", str(tmp_path / "l.sqlite3"))
    assert result.returncode == 2
    assert f"{bad}:7: not UTF-8: byte 45 is 0xff" in result.stderr
    assert "ingested 8 new event(s) from 1 session file(s)" in result.stderr


def test_a_record_with_a_lone_surrogate_escape_is_read(tmp_path: Path) -> None:
    """Node's JSON.stringify writes a broken UTF-16 string (a model's output cut mid-pair) as
    ``"\\udcff"``: JSON, which orjson refuses. Each such record was reported "not JSON" and its
    call or turn lost; it is read as the standard library reads it."""
    src = one("claudecode/regressions/07-*")  # Claude Code: Node
    lines = src.read_bytes().splitlines(keepends=True)
    # A field holding half of an emoji's pair, as JSON.stringify writes it, in every record.
    odd = [raw.rstrip(b"\n")[:-1] + b', "note": "cut \\ud83d"}\n' for raw in lines]
    path = tmp_path / "odd.jsonl"
    path.write_bytes(b"".join(odd))
    report = Report()
    evs: list[Event] = []
    read_file(path, evs.append, report=report)
    assert report.problems == []
    assert kinds(evs) == kinds(events_of(src))
    with pytest.raises(ValueError, match="not JSON"):  # anything else orjson refuses stays bad
        parse(b'{"a": NaN, "b": "\\udcff"}\n')


def test_an_oversized_line_is_skipped_without_being_held(tmp_path: Path) -> None:
    src = one("claudecode/scenarios/2-2_auto-executed-tool-call").read_bytes()
    big = tmp_path / "big.jsonl"
    big.write_bytes(b'{"type": "user", "pad": "' + b"x" * (33 * 1024 * 1024) + b'"}\n' + src)
    report = Report()
    evs: list[Event] = []
    read_file(big, evs.append, fmt="claude-code", report=report)
    (p,) = report.problems
    assert p.lineno == 1
    assert "over the 33554432 limit" in p.reason
    assert kinds(evs) == kinds(events_of(one("claudecode/scenarios/2-2_auto-executed-tool-call")))


def test_files_of_no_format_and_the_wrong_format_are_refused(tmp_path: Path) -> None:
    other = tmp_path / "notes.jsonl"
    other.write_text('{"hello": 1}\n{"world": 2}\n')
    with pytest.raises(NotASessionFile, match="not a Codex, Claude Code or Gemini CLI session"):
        read_file(other, lambda e: None)
    claude = one("claudecode/scenarios/2-20_user-esc-interrupt")
    with pytest.raises(NotASessionFile, match="no codex session record"):
        read_file(claude, lambda e: None, fmt="codex")
    ledger = str(tmp_path / "l.sqlite3")
    codex = one("codex/scenarios/2-20_interrupted-turn")
    result = turnwatch("ingest", str(other), str(codex), "--ledger", ledger)
    assert result.returncode == 2
    assert f"{other}: not a Codex, Claude Code or Gemini CLI session file" in result.stderr
    assert "ingested 8 new event(s) from 1 session file(s)" in result.stderr
    result = turnwatch("ingest", "--format", "claude", str(codex), "--ledger", ledger)
    assert result.returncode == 2
    assert "expected one of events, codex, claude-code" in result.stderr
    result = turnwatch("ingest", str(tmp_path / "gone.jsonl"), "--ledger", ledger)
    assert result.returncode == 2
    assert "gone.jsonl: cannot read (No such file or directory)" in result.stderr


def test_a_directory_is_walked_and_ingesting_twice_adds_nothing(tmp_path: Path) -> None:
    ledger = str(tmp_path / "l.sqlite3")
    root = DATA / "gemini-cli"
    first = turnwatch("ingest", "--format", "gemini-cli", str(root), "--ledger", ledger)
    # events.jsonl, expected.jsonl… under the same tree are not Gemini chats: reported.
    assert "expected.jsonl: no gemini-cli session record" in first.stderr
    assert "from 8 session file(s)" in first.stderr
    again = turnwatch("ingest", "--format", "gemini-cli", str(root), "--ledger", ledger)
    assert "ingested 0 new event(s) from 8 session file(s)" in again.stderr


def test_explain_shows_the_interrupt_of_a_cli_session(tmp_path: Path) -> None:
    ledger = str(tmp_path / "l.sqlite3")
    turnwatch("ingest", str(one("codex/scenarios/2-20_interrupted-turn")), "--ledger", ledger)
    result = turnwatch("explain", "019e286c-172c-7002-84be-55bbaf847453", "--ledger", ledger)
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.replace("│", " ").split())  # the 80-column panel, unwrapped
    assert "Stop clicked source codex" in out
    assert "019e286b-d32b-7240-b709-5a149b364dfc codex idle" in out  # the producer, not a mode
    assert "turn settled" in out
    assert "outcome aborted" in out
    assert "ran 4.02 s" in out


# --- records of odd shapes: reported, never a crash; every event the schema's ---

_ODD = st.sampled_from([None, "", 0, -1, 1.5, True, [], {}, "x" * 300, [None], {"type": None}])


def _records_of(path: Path) -> list[object]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]


_REAL = {str(a.transcript): _records_of(a.transcript) for a in agent_arcs.arcs()}


def _paths(rec: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Every place in a record a value sits: keys and indices, each node and leaf."""
    out = [prefix] if prefix else []
    if isinstance(rec, dict):
        for k, v in rec.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(rec, list):
        for n, v in enumerate(rec[:8]):
            out += _paths(v, (*prefix, n))
    return out


def _set(rec: object, path: tuple[object, ...], odd: object) -> object:
    if not path:
        return odd
    if isinstance(rec, dict):
        return {**rec, path[0]: _set(rec[path[0]], path[1:], odd)}
    assert isinstance(rec, list)
    assert isinstance(path[0], int)
    i = path[0]
    return [*rec[:i], _set(rec[i], path[1:], odd), *rec[i + 1 :]]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(_REAL)), st.data())
def test_real_records_with_odd_fields_are_reported_never_a_crash(
    transcript: str, data: st.DataObject
) -> None:
    """The real recordings, a few fields at a time given shapes no CLI wrote: every event the
    adapter still emits fits the schema, and a record it cannot read is a BadRecord."""
    records = list(_REAL[transcript])
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(records) - 1))
        places = _paths(records[i])
        if places:
            records[i] = _set(records[i], data.draw(st.sampled_from(places)), data.draw(_ODD))
    fmt = agent_arcs.CLIS[Path(transcript).relative_to(DATA).parts[0]]
    tr = FORMATS[fmt]()
    out: list[Event] = []
    for rec in records:
        with contextlib.suppress(BadRecord):
            out += tr.feed(rec)
    out += tr.flush()
    check = validator()
    for ev in out:
        check(orjson.loads(orjson.dumps(ev.to_json())))


def test_every_event_read_from_the_recordings_fits_the_schema() -> None:
    check = validator()
    for arc in agent_arcs.arcs():
        for ev in events_of(arc.transcript):
            check(orjson.loads(orjson.dumps(ev.to_json())))
