"""``make bench``: every benchmark in one run, as markdown on stdout and in benchmarks/latest.md."""

from __future__ import annotations

import asyncio
import datetime
import os
import platform
from pathlib import Path

from benchmarks import modes, stops, tracing, watchdog


def main() -> None:
    parts = [
        f"_Measured {datetime.date.today()} on {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, with `make bench`._\n",
        asyncio.run(modes.main()),
        asyncio.run(stops.main()),
        asyncio.run(tracing.main()),
        watchdog.main(),
    ]
    text = "\n".join(parts)
    print(text)
    (Path(__file__).parent / "latest.md").write_text(text)


if __name__ == "__main__":
    main()
