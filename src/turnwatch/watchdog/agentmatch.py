"""Which process is which agent CLI, and which are its commands: command lines and working
directories read from ``/proc``, never trusted beyond what they show (a recording is proven by
pid and start time, not by these)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from turnwatch.integrations.agentlogs.base import project_of

#: How each CLI shows in a command line: executable or script names, and package paths.
CLI_NAMES: Final[Mapping[str, tuple[frozenset[str], tuple[str, ...]]]] = {
    "codex": (frozenset({"codex", "codex.js"}), ("@openai/codex",)),
    "claude-code": (frozenset({"claude"}), ("@anthropic-ai/claude-code",)),
    "gemini-cli": (frozenset({"gemini", "gemini.js"}), ("@google/gemini-cli",)),
}
SHELLS: Final = frozenset({"bash", "sh", "zsh", "dash", "ksh", "fish"})


def read_argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def cwd_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def holds_open(pid: int, path: str) -> bool:
    """``pid`` has ``path`` open (the CLI writing its session file)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == path:
                return True
        except OSError:
            continue
    return False


def is_cli(source: str, argv: list[str]) -> bool:
    """``argv`` is ``source``'s CLI: its name, or its package, among the first arguments."""
    exact, packages = CLI_NAMES[source]
    return any(os.path.basename(a) in exact or any(p in a for p in packages) for a in argv[:3])


def is_shell_command(argv: list[str]) -> bool:
    """A shell running a command string (``bash -c``, ``bash -lc``, ``sh -c``)."""
    if not argv or os.path.basename(argv[0]).lstrip("-") not in SHELLS:
        return False
    return any(a.startswith("-") and not a.startswith("--") and "c" in a for a in argv[1:4])


def in_project(project: str, cwd: str) -> bool:
    """``cwd``, or a directory above it (a repository's root), hashes to ``project``."""

    d = cwd
    while True:
        if project_of(d) == project:
            return True
        up = os.path.dirname(d)
        if up == d:
            return False
        d = up
