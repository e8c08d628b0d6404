"""A stand-in agent CLI process for the attribution tests: ``python3 DIR/claude`` (its command
line names the CLI), running in the project directory it is given, starting ``bash -c 'sleep
1000'`` children in their own sessions (as the CLIs' shell tools do) on SIGUSR1, and exiting on
SIGTERM without ending them (as Gemini CLI does on a headless Ctrl-C)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def main() -> None:
    children: list[subprocess.Popen[bytes]] = []

    def spawn(_sig: int, _frame: object) -> None:
        children.append(subprocess.Popen(["/bin/bash", "-c", "sleep 1000"], start_new_session=True))
        with open("children.txt", "a") as f:
            f.write(f"{children[-1].pid}\n")

    signal.signal(signal.SIGUSR1, spawn)
    signal.signal(signal.SIGTERM, lambda _s, _f: os._exit(0))
    print("ready", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    os.chdir(sys.argv[1])
    main()
