"""Every bad value is one line on stderr and exit 2: never a traceback, never a spin.

Through the real console script, as people type them.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import streams
from tests.conftest import one_line_exit_2, turnwatch
from turnwatch.exporters import http


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.sqlite3"
    src = streams.write(tmp_path / "four.jsonl", streams.four_states())
    assert turnwatch("ingest", str(src), "--ledger", str(path)).returncode == 0
    return path


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize(
    ("addr", "says"),
    [
        ("127.0.0.1:99999", "port 99999 is not in 0-65535"),
        ("256.1.1.1:9464", "'256.1.1.1' is not an IP address"),
        ("no-such-host.invalid:9464", "cannot resolve 'no-such-host.invalid'"),
        ("9464", "expected HOST:PORT"),
        ("::1:9464", "write an IPv6 host as [::1]:9464"),
    ],
)
def test_bad_metrics_addresses(ledger: Path, addr: str, says: str) -> None:
    for argv in (
        ["serve-metrics", "--metrics-addr", addr],
        ["watch", "--metrics-addr", addr],
        ["demo", "--serve-metrics", addr],
        ["serve", "--addr", addr],
        ["demo", "--web", "--web-addr", addr],
    ):
        one_line_exit_2(turnwatch(*argv, "--ledger", str(ledger)), addr, says)


def test_a_busy_port_is_named(ledger: Path, busy_port: int) -> None:
    addr = f"127.0.0.1:{busy_port}"
    for argv in (
        ["serve-metrics", "--metrics-addr", addr],
        ["watch", "--metrics-addr", addr],
        ["serve", "--addr", addr],
        ["demo", "--web", "--web-addr", addr],
    ):
        one_line_exit_2(turnwatch(*argv, "--ledger", str(ledger)), f"cannot listen on {addr}")


def test_the_demo_checks_its_address_before_running(tmp_path: Path, busy_port: int) -> None:
    ledger = tmp_path / "demo.sqlite3"
    result = turnwatch(
        "demo", "--serve-metrics", f"127.0.0.1:{busy_port}", "--ledger", str(ledger), timeout=20
    )
    one_line_exit_2(result, "cannot listen")
    assert "running the demo" not in result.stderr  # it failed before the run, not after


def test_ipv6_is_printed_with_brackets() -> None:
    assert http.url("[::1]:9464", 9464) == "http://[::1]:9464/metrics"
    assert http.url("127.0.0.1:0", 4242) == "http://127.0.0.1:4242/metrics"


@pytest.mark.parametrize(
    "argv",
    [
        ["watch", "--interval", "0"],
        ["watch", "--interval", "-1"],
        ["watch", "--interval", "1e-9"],  # would spin a core
        ["watch", "--interval", "inf"],  # would sleep forever
        ["watch", "--once", "--grace", "0"],
        ["watch", "--once", "--grace", "inf"],
        ["watch", "--once", "--pinned-after", "-5"],
        ["watch", "--once", "--pinned-after", "nan"],
        ["watch", "--once", "--overdue-after", "nan"],
        ["serve-metrics", "--poll", "0"],
        ["explain", "pinned", "--grace", "-2"],
        ["demo", "--grace", "-1"],
    ],
    ids=" ".join,
)
def test_durations_outside_their_bounds(ledger: Path, argv: list[str]) -> None:
    result = turnwatch(*argv, "--ledger", str(ledger), timeout=20)
    one_line_exit_2(result, argv[-2], "takes seconds from")


def test_a_size_is_said_in_bytes(ledger: Path) -> None:
    result = turnwatch("serve-metrics", "--max-body", "0", "--ledger", str(ledger), timeout=20)
    one_line_exit_2(result, "--max-body takes bytes from 1 to")


def test_ingest_from_a_closed_stdin(tmp_path: Path) -> None:
    import os
    import shutil
    import sys

    exe = shutil.which("turnwatch", path=os.path.dirname(sys.executable))
    assert exe is not None
    result = subprocess.run(
        [exe, "ingest", "-", "--ledger", str(tmp_path / "l.sqlite3")],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: os.close(0),
    )
    one_line_exit_2(result, "standard input is closed")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["serve", "--cors-origin", "nan"], "--cors-origin 'nan': not an origin"),
        (["serve", "--cors-origin", "https://ui.example/app"], "not an origin"),
        (["serve", "--cors-origin", "ftp://ui.example"], "not an origin"),
        (["serve-metrics", "--events", "--cors-origin", "x"], "not an origin"),
        (["serve-metrics", "--token-file", "nan"], "--token-file nan: it guards POST /v1/events"),
        (
            ["serve-metrics", "--cors-origin", "https://a.example"],
            "--cors-origin https://a.example: it guards",
        ),
    ],
)
def test_server_options_that_would_be_ignored_or_never_match(
    ledger: Path, argv: list[str], says: str
) -> None:
    """A new sweep of every option with bad values found two that a server took and then ran
    on: an origin no browser ever sends (``nan``: no page could post), and --token-file where
    no POST /v1/events is served (the token guarded nothing)."""
    one_line_exit_2(turnwatch(*argv, "--ledger", str(ledger)), argv[-1], says)


def test_a_demo_option_its_mode_does_not_read_is_refused_not_ignored(tmp_path: Path) -> None:
    """``--web-addr`` without ``--web`` ran the whole demo and served nothing there; with
    ``--web``, ``--serve-metrics`` was dropped (the page serves the metrics on its own address),
    and so was ``--json``."""
    ledger = str(tmp_path / "demo.sqlite3")
    one_line_exit_2(
        turnwatch("demo", "--web-addr", "127.0.0.1:0", "--ledger", ledger, timeout=20),
        "--web-addr needs --web",
    )
    one_line_exit_2(
        turnwatch(
            "demo", "--web", "--serve-metrics", "127.0.0.1:0", "--ledger", ledger, timeout=20
        ),
        "--serve-metrics",
        "--web-addr",
    )
    one_line_exit_2(
        turnwatch("demo", "--web", "--json", "--ledger", ledger, timeout=20), "--json", "--web"
    )
    assert not Path(ledger).exists()  # refused before anything ran


@pytest.mark.parametrize(
    "option", [["--keep-args"], ["--codex-dir", "d"], ["--claude-dir", "d"], ["--gemini-dir", "d"]]
)
def test_watch_refuses_an_agent_option_without_agents(ledger: Path, option: list[str]) -> None:
    """Each is read only while following the agent CLIs' files: without ``--agents`` it was
    dropped, and a watchdog meant to follow them followed nothing, saying nothing."""
    one_line_exit_2(
        turnwatch("watch", "--once", *option, "--ledger", str(ledger)),
        f"{option[0]} needs --agents",
    )
