"""Reading the agent CLIs' session files: ``turnwatch ingest`` over a 100 MB directory, and the
CPU ``watch --agents`` takes following 100 live files.

The directory is the real recordings in ``tests/data/agent-logs`` replayed with new session ids
until it holds 100 MB. Parsing alone (the adapters into a no-op sink) is measured beside the
whole command (ledger, spans, metrics), in the same run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.common import table
from turnwatch.integrations.agentlogs import Report, read_file

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "agent-logs"
TARGET_BYTES = 100 * 1024 * 1024
LIVE_FILES = 100
FOLLOW_S = 10.0

_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def renamed(body: bytes, k: int) -> bytes:
    """Every UUID with a copy-specific last group: sessions, turns and messages stay consistent
    within the copy, and no copy collides with another."""
    tag = f"{k:012x}".encode()
    return _UUID.sub(lambda m: m.group(0)[:24] + tag, body)


def build(root: Path) -> int:
    """Copies of every recording, each with its ids renamed, until ``root`` holds 100 MB."""
    sources = sorted(DATA.glob("*/*/*/recordings/*/transcript.jsonl"))
    total, k = 0, 0
    while total < TARGET_BYTES:
        for src in sources:
            body = renamed(src.read_bytes(), k)
            out = root / f"c{k:04d}" / f"{src.parents[3].name}-{src.parents[2].name}.jsonl"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(body)
            total += len(body)
            k += 1
            if total >= TARGET_BYTES:
                break
    return total


def turnwatch() -> list[str]:
    exe = shutil.which("turnwatch", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "turnwatch"]


def ingest_rows(tmp: Path) -> list[list[object]]:
    corpus = tmp / "corpus"
    size = build(corpus)
    files = sorted(corpus.rglob("*.jsonl"))
    report = Report()
    t0 = time.perf_counter()
    for f in files:
        read_file(f, lambda _e: None, report=report)
    parse_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    done = subprocess.run(
        [*turnwatch(), "ingest", str(corpus), "--ledger", str(tmp / "l.sqlite3")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    cmd_s = time.perf_counter() - t0
    assert done.returncode == 0, done.stderr
    mb = size / 1e6
    return [
        [
            "adapters alone (no-op sink)",
            f"{parse_s:.2f} s",
            f"{mb / parse_s:.0f} MB/s",
            f"{report.records / parse_s:,.0f}",
            "",
        ],
        [
            f"`turnwatch ingest DIR` ({len(files)} files, {mb:.0f} MB, {report.events:,} events)",
            f"{cmd_s:.2f} s",
            f"{mb / cmd_s:.0f} MB/s",
            f"{report.records / cmd_s:,.0f}",
            f"{cmd_s / parse_s:.2f}× the adapters",
        ],
    ]


def follow_rows(tmp: Path) -> list[list[object]]:
    """CPU share of ``watch --agents`` while 100 files grow a record a second each."""
    codex = tmp / "codex"
    lines = next(DATA.glob("codex/scenarios/2-6_*/recordings/*/transcript.jsonl")).read_bytes()
    records = lines.splitlines(keepends=True)
    paths = []
    for i in range(LIVE_FILES):
        p = codex / "2026" / "12" / "01" / f"rollout-{i:03d}.jsonl"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(renamed(records[0], i))
        paths.append(p)
    cmd = [*turnwatch(), "watch", "--agents", "--codex-dir", str(codex)]
    cmd += ["--claude-dir", str(tmp / "none"), "--gemini-dir", str(tmp / "none")]
    cmd += ["--ledger", str(tmp / "f.sqlite3"), "--metrics-addr", "", "--interval", "5"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ps = psutil.Process(proc.pid)
    try:
        time.sleep(3.0)  # started, and the first files read

        def cpu() -> float:
            t = ps.cpu_times()
            return t.user + t.system

        rows: list[list[object]] = []
        for label, grow in (("idle (100 files, none growing)", False), ("100 files growing", True)):
            c0, w0 = cpu(), time.perf_counter()
            n = 1
            while time.perf_counter() - w0 < FOLLOW_S:
                if grow:
                    for p in paths:
                        with open(p, "ab") as out:
                            out.write(records[n % len(records)])
                    n += 1
                time.sleep(1.0)
            share = (cpu() - c0) / (time.perf_counter() - w0)
            rows.append([label, f"{share * 100:.1f} % of one core", f"{n - 1} record(s)/file"])
        return rows
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> str:
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        ingest = ingest_rows(tmp)
        follow = follow_rows(tmp)
    return "\n".join(
        [
            "## Agent CLI session files\n",
            "Target: a 100 MB directory ingested in ≤ 10 s.\n",
            table(["reading", "time", "throughput", "records/s", ""], ingest),
            "",
            "`watch --agents` following 100 live Codex rollouts (10 s each):\n",
            table(["files", "CPU", "written"], follow),
            "",
        ]
    )


if __name__ == "__main__":
    print(main())
