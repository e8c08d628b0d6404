"""Arize Phoenix, a real OTLP backend, in a virtual environment of its own.

``python -m tests.exporters.phoenix`` (what ``make phoenix`` runs) installs it once into
``$TURNWATCH_PHOENIX`` (default ``~/.cache/turnwatch/phoenix-<version>``), kept between runs and
checkouts: it is large (about 850 MB) and takes minutes to install. Only the standard library is
used here, so the installer runs before turnwatch's own environment exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERSION = "20.26.1"
SETUP = "make phoenix"


def home() -> Path:
    """Where the virtual environment lives."""
    if os.environ.get("TURNWATCH_PHOENIX"):
        return Path(os.environ["TURNWATCH_PHOENIX"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "turnwatch" / f"phoenix-{VERSION}"


def executable() -> Path | None:
    """The ``phoenix`` program, if it is installed (and finished installing)."""
    exe = home() / "bin" / "phoenix"
    return exe if exe.exists() and (home() / ".installed").exists() else None


def install() -> Path:
    """Install Phoenix once; a second call (or an interrupted first one re-run) is cheap."""
    if (exe := executable()) is not None:
        return exe
    venv = home()
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]
    subprocess.run([*pip, f"arize-phoenix=={VERSION}"], check=True)
    (venv / ".installed").write_text(VERSION + "\n")
    return venv / "bin" / "phoenix"


@dataclass
class Phoenix:
    """A running Phoenix: its HTTP base (UI, REST and OTLP/HTTP) and its OTLP/gRPC port."""

    base: str
    grpc_port: int

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=10) as resp:
            return json.load(resp)

    def spans(self, project: str) -> list[dict[str, Any]]:
        """Every span of ``project`` (none if the project does not exist yet)."""
        out: list[dict[str, Any]] = []
        cursor = ""
        while True:
            try:
                page = self.get(f"/v1/projects/{project}/spans?limit=1000{cursor}")
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return out
                raise
            out += page["data"]
            if not page.get("next_cursor"):
                return out
            cursor = f"&cursor={page['next_cursor']}"


@contextmanager
def serve(exe: Path, workdir: Path, http_port: int, grpc_port: int) -> Iterator[Phoenix]:
    """``phoenix serve`` with its own working directory and ports, until the block ends."""
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(workdir),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(http_port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = (workdir / "phoenix.log").open("wb")
    proc = subprocess.Popen(
        [str(exe), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=workdir
    )
    phoenix = Phoenix(f"http://127.0.0.1:{http_port}", grpc_port)
    try:
        deadline = time.monotonic() + 180  # migrations and a cold import take a while
        while True:
            if proc.poll() is not None:
                tail = (workdir / "phoenix.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"phoenix serve exited {proc.returncode}:\n{tail}")
            try:
                phoenix.get("/v1/projects")
                break
            except (OSError, ValueError):
                if time.monotonic() > deadline:
                    raise RuntimeError("phoenix serve did not answer within 180 s") from None
                time.sleep(0.5)
        yield phoenix
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


if __name__ == "__main__":
    print(install())
