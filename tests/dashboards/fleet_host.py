"""One host of a fleet, for the end-to-end Prometheus test: a real runtime that runs stops and
serves /metrics. With ``--ledger``, it also runs the watchdog beside the runtime (like a deployed
node) and recovers a pinned legacy session.

    python -m tests.dashboards.fleet_host PORT_FILE STOPS [--ledger PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from turnwatch.exporters import http
from turnwatch.exporters.live import runtime_state
from turnwatch.exporters.metrics import LiveCollector, StopMetrics
from turnwatch.runtime import LocalHost, MemorySink, Mode, Runtime
from turnwatch.tracing.ledger import Ledger
from turnwatch.tracing.pipeline import Telemetry
from turnwatch.tracing.spans import SpanBuilder
from turnwatch.watchdog.gauges import live_state
from turnwatch.watchdog.loop import Watchdog
from turnwatch.watchdog.scan import Config


async def stops(rt: Runtime, n: int, tmp: Path, prefix: str, seen: MemorySink) -> None:
    for i in range(n):
        fifo = tmp / f"{prefix}{i}.fifo"
        os.mkfifo(fifo)
        turn = rt.start_turn(f"{prefix}{i}")
        turn.request("Grep", {"pattern": "x", "path": str(fifo)})
        turn.request("Bash", {"command": "echo up; exec sleep 300"})
        turn.request("Write", {"path": str(tmp / f"{prefix}{i}.txt"), "content": "x"})
        while (
            len(
                [
                    e
                    for e in seen.events
                    if e.session == f"{prefix}{i}"
                    and e.kind in ("tool.progress", "permission.requested")
                ]
            )
            < 2
        ):
            await asyncio.sleep(0.01)
        await rt.abort(f"{prefix}{i}")
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


async def main(port_file: Path, n: int, ledger_path: Path | None) -> None:
    registry = CollectorRegistry()
    metrics = StopMetrics(registry)
    spans = SpanBuilder(TracerProvider().get_tracer("fleet"))
    seen = MemorySink()
    ledger = Ledger(ledger_path) if ledger_path else None
    telemetry = Telemetry(ledger=ledger, spans=spans, observers=[metrics])

    def sink(ev: object) -> None:
        seen(ev)  # type: ignore[arg-type]
        telemetry(ev)  # type: ignore[arg-type]

    host = LocalHost()
    rt = Runtime(host, grace_s=1.0, sink=sink, ask_permission=lambda t, _c: t == "Write")
    if ledger is not None and ledger_path is not None:
        registry.register(LiveCollector(lambda: live_state(ledger_path, ledger)))
    else:
        registry.register(LiveCollector(lambda: runtime_state(rt)))
    _server, port = http.serve(registry, "127.0.0.1:0")
    port_file.write_text(str(port))
    with tempfile.TemporaryDirectory() as tmp:
        await stops(rt, n, Path(tmp), "s", seen)
        if ledger is not None and ledger_path is not None:
            legacy = Runtime(host, mode=Mode.LEGACY, grace_s=1.0, sink=sink)
            fifo = Path(tmp) / "pin.fifo"
            os.mkfifo(fifo)
            legacy.start_turn("pin").request("Grep", {"pattern": "x", "path": str(fifo)})
            pinned = asyncio.ensure_future(legacy.abort("pin"))
            dog = Watchdog(
                ledger_path,
                telemetry,
                ledger.flush,
                cfg=Config(grace_s=1.0, rpc_stuck_s=0.5),
                runtime=legacy,
                observe_scan=metrics.scan.observe,
            )
            while not pinned.done():
                ledger.flush()
                await dog.cycle()
                await asyncio.sleep(0.2)
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            for _ in range(5):
                await dog.cycle()
            ledger.flush()
        (port_file.parent / f"{port_file.name}.done").write_text("done")
        while True:
            await asyncio.sleep(1)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("port_file", type=Path)
    p.add_argument("stops", type=int)
    p.add_argument("--ledger", type=Path)
    a = p.parse_args()
    asyncio.run(main(a.port_file, a.stops, a.ledger))
