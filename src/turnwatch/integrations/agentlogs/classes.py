"""Which turnwatch class each agent CLI's tools belong to: the one table.

The class fixes what a stop may do to a call (design §1): a ``process`` tool's processes are
terminated after the grace window, a ``read_only`` one is raced, ``mutating`` and ``extension``
calls are awaited. A tool the table does not name is ``extension`` (MCP servers, plugins,
subagents): awaited, never signalled, which is the safe side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from turnwatch.runtime.model import ToolClass

R, P, M, X = ToolClass.READ_ONLY, ToolClass.PROCESS, ToolClass.MUTATING, ToolClass.EXTENSION

CODEX: Final[Mapping[str, ToolClass]] = {
    "exec_command": P,
    "shell": P,
    "local_shell": P,
    "container.exec": P,
    "unified_exec": P,
    "write_stdin": P,
    # Codex's code mode: JavaScript calling tools.exec_command and the like.
    "exec": P,
    "apply_patch": M,
    "update_plan": R,
    "view_image": R,
    "web_search": R,
}

CLAUDE_CODE: Final[Mapping[str, ToolClass]] = {
    "Bash": P,
    "Read": R,
    "Grep": R,
    "Glob": R,
    "LS": R,
    "WebFetch": R,
    "WebSearch": R,
    "BashOutput": R,
    "TaskOutput": R,
    "ToolSearch": R,
    "Edit": M,
    "MultiEdit": M,
    "Write": M,
    "NotebookEdit": M,
    "TodoWrite": M,
    "KillShell": M,
    "TaskStop": M,
    # A subagent runs tools of its own; the parent's call is awaited like an extension.
    "Task": X,
    "Agent": X,
}

GEMINI_CLI: Final[Mapping[str, ToolClass]] = {
    "run_shell_command": P,
    "read_file": R,
    "read_many_files": R,
    "list_directory": R,
    "glob": R,
    "search_file_content": R,
    "grep_search": R,
    "google_web_search": R,
    "web_fetch": R,
    "write_file": M,
    "replace": M,
    "edit": M,
    "save_memory": M,
    "write_todos": M,
}

TABLES: Final[Mapping[str, Mapping[str, ToolClass]]] = {
    "codex": CODEX,
    "claude-code": CLAUDE_CODE,
    "gemini-cli": GEMINI_CLI,
}


def cli_tool_class(source: str, tool: str) -> ToolClass:
    """The class of ``tool`` as ``source`` (``codex``, ``claude-code``, ``gemini-cli``) names it."""
    return TABLES[source].get(tool, ToolClass.EXTENSION)


def __getattr__(name: str) -> object:
    if name == "class_for":  # its name until 0.1 (beside runtime.model.class_of); kept through 0.2
        import warnings

        warnings.warn(
            "agentlogs.classes.class_for is deprecated: use cli_tool_class",
            DeprecationWarning,
            stacklevel=2,
        )
        return cli_tool_class
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
