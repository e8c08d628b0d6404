"""The agent CLIs' own session files, read as turnwatch events: Codex rollouts, Claude Code
transcripts, Gemini CLI chats.

Most agent turns run in CLIs turnwatch cannot wrap; their session files say when a turn began,
which tools ran, and where the user interrupted. Each format becomes the events of design §3 with
the CLI's own session, turn and call ids, and ``runtime.started``'s ``source`` names the CLI.
What each tool's class is lives in one table (:mod:`.classes`). Nothing here imports a CLI: the
files are the interface.
"""

from __future__ import annotations

from turnwatch.integrations.agentlogs.base import Translator
from turnwatch.integrations.agentlogs.classes import TABLES, cli_tool_class
from turnwatch.integrations.agentlogs.formats import FORMATS, default_roots, session_files
from turnwatch.integrations.agentlogs.reader import NotASessionFile, Problem, Report, read_file

__all__ = [
    "FORMATS",
    "TABLES",
    "NotASessionFile",
    "Problem",
    "Report",
    "Translator",
    "cli_tool_class",
    "default_roots",
    "read_file",
    "session_files",
]
