"""``make bench``: every benchmark in one run, as markdown on stdout and in benchmarks/latest.md.

``python -m benchmarks --no-soak`` runs every section but the soak (about twelve minutes instead
of more than an hour), and says so in what it writes.
"""

from __future__ import annotations

import asyncio
import datetime
import gc
import os
import platform
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if any(a != "--no-soak" for a in args):
        print(
            f"error: unknown argument {args!r}; usage: python -m benchmarks [--no-soak]",
            file=sys.stderr,
        )
        sys.exit(2)
    soaked = "--no-soak" not in args
    # The sections after the arguments: they import every framework (tens of seconds on a busy
    # machine), and a wrong argument is told at once.
    from benchmarks import (
        agentlogs,
        agentprocs,
        agents_sdk,
        browser,
        containment,
        google_adk,
        instructions,
        integrations,
        langgraph,
        modes,
        soak,
        startup,
        stops,
        tracing,
        watchdog,
    )

    how = "`make bench`" if soaked else "`python -m benchmarks --no-soak` (all but the soak)"
    parts = [
        f"_Measured {datetime.date.today()} on {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, with {how}._\n"
    ]
    sections: list[Callable[[], str | Coroutine[Any, Any, str]]] = [
        modes.main,
        stops.main,
        containment.main,
        tracing.main,
        watchdog.main,
        startup.main,
        integrations.main,
        agents_sdk.main,
        langgraph.main,
        google_adk.main,
        browser.main,
        agentlogs.main,
        agentprocs.main,
        instructions.main,
    ]
    if soaked:
        sections.append(soak.main)  # last, and the longest: TURNWATCH_SOAK_SESSIONS sessions
    for section in sections:
        # Each section starts with no garbage of the one before: a full collection of another
        # section's cycles would otherwise land in, say, one of the timed abort walks.
        gc.collect()
        result = section()
        parts.append(result if isinstance(result, str) else asyncio.run(result))
    text = "\n".join(parts)
    print(text)
    (Path(__file__).parent / "latest.md").write_text(text)


if __name__ == "__main__":
    main()
