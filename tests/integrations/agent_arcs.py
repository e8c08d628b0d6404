"""The peer's expected state arcs against turnwatch's reading of the same recordings.

``tests/data/agent-logs`` holds real Codex, Claude Code and Gemini CLI session files with the
expected arc of the tool that recorded them (Irrlicht, MIT): ``ready`` / ``working`` /
``waiting``. turnwatch's session state after ingesting each file must agree with the arc's final
state (ready is ``idle``, working is ``processing``, waiting is a pending permission), or the
disagreement is explained here, and the README shows the table.

``python -m tests.integrations.agent_arcs --write`` rewrites the README's table.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from turnwatch import names

DATA = Path(__file__).resolve().parents[1] / "data" / "agent-logs"
README = Path(__file__).resolve().parents[2] / "README.md"
START, END = "<!-- agent-arcs:start -->", "<!-- agent-arcs:end -->"
CLIS = {"codex": "codex", "claudecode": "claude-code", "gemini-cli": "gemini-cli"}
STATE_OF = {"ready": names.STATE_IDLE, "working": names.STATE_PROCESSING, "waiting": "waiting"}

#: Every disagreement, explained: what the file holds, and why turnwatch reads it so.
EXPLAINED = {
    "claude-code 2-19_tool-gate-permission-prompt": (
        "The prompt exists only on screen: the transcript ends at the user's prompt, with no "
        "`tool_use` written yet, so the file shows a turn working. The peer saw `waiting` "
        "through a PreToolUse hook, not the file."
    ),
    "claude-code 2-20_user-esc-interrupt": (
        "The transcript holds no `[Request interrupted by user]` marker: Claude Code 2.1.143 "
        "wrote nothing for an Esc during its first streamed reply. The peer's own run did not "
        "see `ready` either (2/3 phases; its recording ends at the process's exit)."
    ),
    "codex 2-19_tool-gate-permission-prompt": (
        "Codex keeps the approval overlay out of the rollout; the file ends with the `exec` call "
        "requested and no output, so turnwatch shows it in flight. The peer saw `waiting` "
        "through Codex's HTTP hook, not the file."
    ),
}


@dataclass
class Arc:
    cli: str
    scenario: str
    recording: str
    transcript: Path
    expected: str | None  # the arc's final state (None: a regression without an arc)
    replayed: str | None  # the peer's own replay of the file (its golden's last state)

    @property
    def key(self) -> str:
        return f"{self.cli} {self.scenario}"


def arcs() -> list[Arc]:
    out = []
    for t in sorted(DATA.glob("*/*/*/recordings/*/transcript.jsonl")):
        scenario_dir = t.parents[2]
        exp = scenario_dir / "expected.jsonl"
        expected = None
        if exp.exists():
            states = [json.loads(x).get("expected_state") for x in exp.read_text().splitlines()]
            expected = [s for s in states if s][-1]
        golden = t.with_name("transcript.jsonl.replay.json.golden")
        replayed = None
        if golden.exists():
            replayed = json.loads(golden.read_text())["transitions"][-1]["new_state"]
        cli = CLIS[scenario_dir.parents[1].name]
        out.append(Arc(cli, scenario_dir.name, t.parent.name[:19], t, expected, replayed))
    return out


def state_of(conn: object, session: str) -> str:
    """turnwatch's state of ``session``, in the peer's words' terms (``waiting``: a prompt)."""
    from turnwatch.tracing import view

    (sv,) = view.sessions(conn, only=session)  # type: ignore[arg-type]
    if sv.state == names.STATE_PROCESSING and any(c.prompt_open for c in sv.calls):
        return "waiting"
    return sv.state


def table(rows: list[tuple[Arc, str]]) -> str:
    lines = [
        "| CLI | recording | expected (arc) | peer's replay | turnwatch | |",
        "|---|---|---|---|---|---|",
    ]
    for arc, got in rows:
        want = STATE_OF[arc.expected] if arc.expected else None
        mark = "—" if want is None else ("agrees" if got == want else "**differs** ¹")
        lines.append(
            f"| {arc.cli} | {arc.scenario} `{arc.recording}` | {arc.expected or '—'} | "
            f"{arc.replayed or '—'} | {got} | {mark} |"
        )
    notes = [f"- {k}: {v}" for k, v in EXPLAINED.items()]
    return "\n".join([*lines, "", "¹ Why:", "", *notes])


def measure(ledger: Path) -> list[tuple[Arc, str]]:
    """Ingest every recording (formats detected) through the CLI, then read the states."""
    import subprocess

    from turnwatch.integrations.agentlogs import read_file
    from turnwatch.tracing.ledger import connect

    every = arcs()
    cmd = [sys.executable, "-m", "turnwatch", "ingest", "--ledger", str(ledger)]
    done = subprocess.run(
        [*cmd, *(str(a.transcript) for a in every)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    conn = connect(ledger, readonly=True)
    rows = []
    for a in every:
        events: list[object] = []
        read_file(a.transcript, events.append)
        session = events[0].session  # type: ignore[attr-defined]
        rows.append((a, state_of(conn, session)))
    conn.close()
    return rows


def readme_table() -> str:
    text = README.read_text()
    return text[text.index(START) + len(START) : text.index(END)].strip()


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        new = table(measure(Path(d) / "arcs.sqlite3"))
    if "--write" in sys.argv:
        text = README.read_text()
        head, tail = text[: text.index(START) + len(START)], text[text.index(END) :]
        README.write_text(f"{head}\n{new}\n{tail}")
    print(new)
