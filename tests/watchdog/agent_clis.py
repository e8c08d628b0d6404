"""The real agent CLIs, offline: where they are installed, and how a test drives them.

CI installs them with npm at pinned versions (``.ci/run``) into ``$TURNWATCH_AGENT_CLIS``
(default ``.cache/agent-clis`` in the checkout); without them the tests that need them skip, and
with ``TURNWATCH_REQUIRE_AGENT_CLIS=1`` (CI) they fail instead.

All three run fully offline. Gemini CLI: a throwaway ``HOME`` with settings that turn off every
network feature, and ``--fake-responses-non-strict`` answering its model calls from a file in the
format of the CLI's own integration tests. Claude Code and Codex: a throwaway ``HOME`` (and
``CODEX_HOME``) whose API is the scripted server of ``model_server.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The versions `make agent-clis` installs (keep the two in step).
PACKAGES = {
    "gemini": "@google/gemini-cli@0.61.0",
    "claude": "@anthropic-ai/claude-code@2.1.197",
    "codex": "@openai/codex@0.171.0",
}


def prefix() -> Path:
    return Path(os.environ.get("TURNWATCH_AGENT_CLIS", ROOT / ".cache" / "agent-clis"))


def installed(name: str) -> Path:
    """The CLI's executable, or skip (fail in CI) when it is not installed."""
    exe = prefix() / "node_modules" / ".bin" / name
    if exe.exists():
        return exe
    if os.environ.get("TURNWATCH_REQUIRE_AGENT_CLIS") == "1":
        pytest.fail(f"TURNWATCH_REQUIRE_AGENT_CLIS=1 but {exe} is not installed")
    pytest.skip(f"{name} not installed: make agent-clis ({PACKAGES[name]})")


def gemini() -> Path:
    return installed("gemini")


def claude_env(tmp: Path, base_url: str) -> dict[str, str]:
    """Claude Code offline: a throwaway HOME, the scripted server as its API, no other traffic."""
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-scripted",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


SETTINGS = {
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "ide": {"hasSeenNudge": True, "enabled": False},
}


def _candidate(parts: list[dict[str, object]]) -> dict[str, object]:
    return {"candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": "STOP"}]}


def scripted_model(command: str) -> str:
    """Fake responses: the router's choice, a turn that runs ``command`` in the shell tool, and
    the reply after it (never reached when the command sleeps)."""
    router = {
        "reasoning": "simple",
        "model_choice": "flash",
        "complexity_reasoning": "simple",
        "complexity_score": 1,
    }
    call: dict[str, object] = {
        "functionCall": {"name": "run_shell_command", "args": {"command": command}}
    }
    lines: list[dict[str, object]] = [
        {"method": "generateContent", "response": _candidate([{"text": json.dumps(router)}])},
        {"method": "generateContentStream", "response": [_candidate([call])]},
        {"method": "generateContentStream", "response": [_candidate([{"text": "done"}])]},
    ]
    return "".join(json.dumps(x) + "\n" for x in lines)


def gemini_home(tmp: Path, command: str) -> tuple[Path, Path, Path, dict[str, str]]:
    """(home, project, responses file, environment) for one offline Gemini CLI run."""
    home, project = tmp / "home", tmp / "project"
    for d in (home / ".gemini", project / ".gemini"):
        d.mkdir(parents=True)
        (d / "settings.json").write_text(json.dumps(SETTINGS))
    responses = tmp / "responses.jsonl"
    responses.write_text(scripted_model(command))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GEMINI_API_KEY": "fake",
        # Without it an outer node process ignores SIGINT and relaunches a child.
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "TERM": "xterm-256color",
    }
    return home, project, responses, env


def codex_env(tmp: Path, base_url: str) -> dict[str, str]:
    """Codex offline: a throwaway CODEX_HOME whose model provider is the scripted server, no
    approvals asked (a test has no one to answer) and no sandbox (it needs a kernel feature
    this machine may lack)."""
    home = tmp / "home"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model = "gpt-scripted"\n'
        'model_provider = "scripted"\n'
        'approval_policy = "never"\n'
        'sandbox_mode = "danger-full-access"\n'
        "[model_providers.scripted]\n"
        'name = "scripted"\n'
        f'base_url = "{base_url}/v1"\n'
        'env_key = "SCRIPTED_API_KEY"\n'
        'wire_api = "responses"\n'
    )
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "SCRIPTED_API_KEY": "sk-scripted",
    }
