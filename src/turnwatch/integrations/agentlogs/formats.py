"""The three formats by name, where each CLI keeps its files, and telling them apart."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from turnwatch.integrations.agentlogs.base import Translator
from turnwatch.integrations.agentlogs.claude_code import ClaudeCode
from turnwatch.integrations.agentlogs.codex import Codex
from turnwatch.integrations.agentlogs.gemini_cli import GeminiCli

FORMATS: Final[Mapping[str, type[Translator]]] = {
    Codex.source: Codex,
    ClaudeCode.source: ClaudeCode,
    GeminiCli.source: GeminiCli,
}

_CODEX_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context"})
_GEMINI_TYPES = frozenset({"user", "gemini", "info", "error", "warning"})


def sniff(rec: Any) -> str | None:
    """The format one record belongs to, or None when it could be any (or none)."""
    if not isinstance(rec, dict):
        return None
    kind = rec.get("type")
    if kind in _CODEX_TYPES and isinstance(rec.get("payload"), dict):
        return Codex.source
    if "projectHash" in rec or "$set" in rec:
        return GeminiCli.source
    if "uuid" in rec or "parentUuid" in rec or "leafUuid" in rec or kind == "permission-mode":
        return ClaudeCode.source
    if kind == "file-history-snapshot":
        return ClaudeCode.source
    if kind in _GEMINI_TYPES and "id" in rec and "content" in rec:
        return GeminiCli.source
    return None


#: Where each CLI writes its session files, and the environment variable that moves it.
def default_roots(env: Mapping[str, str] | None = None) -> dict[str, Path]:
    """``{format: directory}``: ``$CODEX_HOME/sessions`` (``~/.codex/sessions``),
    ``$CLAUDE_CONFIG_DIR/projects`` (``~/.claude/projects``), ``~/.gemini/tmp``."""
    env = os.environ if env is None else env
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    codex = Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else home / ".codex"
    claude = Path(env["CLAUDE_CONFIG_DIR"]) if env.get("CLAUDE_CONFIG_DIR") else home / ".claude"
    return {
        Codex.source: codex / "sessions",
        ClaudeCode.source: claude / "projects",
        GeminiCli.source: home / ".gemini" / "tmp",
    }


def _jsonl(p: Path) -> bool:
    return p.suffix == ".jsonl"


#: Which files under a root are session files.
_MATCH: Final[Mapping[str, Callable[[Path], bool]]] = {
    Codex.source: lambda p: p.name.startswith("rollout-") and p.suffix == ".jsonl",
    ClaudeCode.source: lambda p: p.suffix == ".jsonl",
    GeminiCli.source: lambda p: p.parent.name == "chats" and p.suffix == ".jsonl",
}


def session_files(root: Path, fmt: str | None = None) -> list[Path]:
    """The ``.jsonl`` files under ``root`` (named as ``fmt`` names its session files, when
    given: a CLI's default directory holds other files too), oldest first."""
    if root.is_file():
        return [root]
    match = _MATCH.get(fmt or "", _jsonl)
    found: list[tuple[float, Path]] = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath, name)
            if match(p):
                try:
                    found.append((p.stat().st_mtime, p))
                except OSError:
                    continue  # gone between the listing and the look
    return [p for _t, p in sorted(found)]
