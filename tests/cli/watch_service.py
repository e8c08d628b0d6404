"""``turnwatch watch`` run as a service is: the real console script in a subprocess, its
/metrics scraped for the scan count (a monitor's view of whether it is alive)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.conftest import wait_until
from turnwatch import names

SCANS = names.M_SCAN + "_count "


class WatchService:
    """``turnwatch watch --interval 0.2`` on ``ledger``, metrics on a free port."""

    def __init__(self, ledger: Path, *extra: str) -> None:
        exe = shutil.which("turnwatch", path=os.path.dirname(sys.executable))
        assert exe is not None
        argv = [exe, "watch", "--interval", "0.2", "--metrics-addr", "127.0.0.1:0"]
        self.proc = subprocess.Popen(
            [*argv, "--ledger", str(ledger), *extra],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        #: What it said before "metrics on http://127.0.0.1:PORT/metrics" (the ledger read).
        self.said: list[str] = []
        while not (line := self.proc.stderr.readline()).startswith("metrics on ") and line:
            self.said.append(line)
        self.url = line.split()[-1]
        assert self.url.startswith("http://127.0.0.1:"), (line, self.said)
        self.last: list[object] = []  # the last scrape, or why it failed

    def scans(self) -> float:
        """Scans done so far, or -1 when the scrape failed."""
        try:
            with urllib.request.urlopen(self.url, timeout=10) as resp:
                text = resp.read().decode()
        except OSError as exc:
            # A scrape a loaded machine's kernel reset (seen once: ECONNRESET on connect,
            # two CPU burners beside the suite): a monitor scrapes again, and so does this.
            self.last[:] = [exc]
            return -1.0
        line = next(ln for ln in text.splitlines() if ln.startswith(SCANS))
        self.last[:] = [line]
        return float(line.split()[-1])

    def scanned(self, n: float, what: str) -> None:
        """Wait for ``n`` scans (a hang detector, not a speed test: 90 s); raise if it exited."""
        wait_until(lambda: self.scans() >= n or self.proc.poll() is not None, timeout=90, what=what)
        self.alive()

    def alive(self) -> None:
        """Raise with what it said, if it exited."""
        if self.proc.poll() is not None:
            assert self.proc.stderr is not None
            said = self.proc.stderr.read()
            raise AssertionError(
                f"watch exited {self.proc.returncode}: {said!r}; last scrape: {self.last}"
            )

    def stop(self) -> tuple[int, str]:
        """SIGTERM, as a service manager stops it: its exit code and all it said."""
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, "".join(self.said) + err
