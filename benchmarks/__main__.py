"""``make bench``: every benchmark in one run, as markdown on stdout and in benchmarks/latest.md."""

from __future__ import annotations

import asyncio
import datetime
import gc
import os
import platform
from pathlib import Path

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


def main() -> None:
    parts = [
        f"_Measured {datetime.date.today()} on {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, with `make bench`._\n"
    ]
    for section in (
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
        soak.main,  # last, and the longest: TURNWATCH_SOAK_SESSIONS sessions (1,000,000)
    ):
        # Each section starts with no garbage of the one before: a full collection of another
        # section's cycles would otherwise land in, say, one of the timed abort walks.
        gc.collect()
        result = section()
        parts.append(asyncio.run(result) if asyncio.iscoroutine(result) else result)
    text = "\n".join(parts)
    print(text)
    (Path(__file__).parent / "latest.md").write_text(text)


if __name__ == "__main__":
    main()
