"""``turnwatch watch`` and ``turnwatch recover``: the watchdog as a program."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from turnwatch.cli.common import said_lost
from turnwatch.watchdog.loop import Cycle, Watchdog
from turnwatch.watchdog.report import ChangeLog
from turnwatch.watchdog.scan import Config

if TYPE_CHECKING:
    from turnwatch.cli import agent_files
    from turnwatch.tracing.ledger import Ledger
    from turnwatch.watchdog.threads import Threads

# The metrics server (prometheus_client, http.server) and the agent CLIs' readers are imported
# where they are used: `recover` and `watch --once` start without them (~65 ms of imports).


def make_watchdog(
    path: Path,
    cfg: Config,
    *,
    recover: bool,
    dry_run: bool,
    say: Callable[[str], None],
    observe_scan: Callable[[float], None] | None = None,
    agents: Agents | None = None,
    write: bool = True,
    retain_s: float | None = None,
    threads: Threads | None = None,
) -> tuple[Watchdog, Callable[[], Ledger | None]]:
    """A watchdog recording its findings and actions (and their spans) into the ledger at
    ``path``, and what closes both (the ledger first: its writer builds the spans).

    With ``agents``, the agent CLIs' session files are followed into the same ledger: read
    once before each scan (``cycle``), and by a thread between scans in the loop. Without
    ``write`` (a look: ``watch --once``, ``recover --dry-run``), it opens no writer and records
    nothing: looking never writes (design §6)."""
    if not write and agents is None:
        look = Watchdog(
            path,
            _nothing,
            _nothing,
            cfg=cfg,
            recover=recover,
            dry_run=True,
            say=say,
            threads=threads,
        )
        return look, lambda: None
    # Imported here: a look (`watch --once`, `recover --dry-run`) builds no spans (~30 ms) and
    # writes nothing (the ledger's writer thread and its pipeline).
    from turnwatch.exporters.otel import tracer_provider
    from turnwatch.tracing.ledger import Ledger
    from turnwatch.tracing.pipeline import Telemetry
    from turnwatch.tracing.spans import SpanBuilder

    provider = tracer_provider()  # first: an exporter that cannot be had opens nothing
    ledger = Ledger(path)
    telemetry = Telemetry(
        ledger=ledger, spans=SpanBuilder(provider.get_tracer("turnwatch.watchdog"))
    )
    stop_following: Callable[[], None] | None = None
    flush: Callable[[], object] = ledger.flush
    also = None
    if agents is not None:
        from turnwatch.cli import agent_files

        watch = agent_files.AgentWatch(ledger, agents.roots, keep_args=agents.keep_args, say=say)
        stop_following = agents.start(watch)
        also = watch.attributor.findings

        def flush() -> object:  # what the CLIs wrote and ran so far, recorded before the scan
            agents.poll(watch)
            return ledger.flush()

    def close() -> Ledger | None:
        if stop_following is not None:  # first: what it read is written before the ledger shuts
            stop_following()
        ledger.close()
        provider.shutdown()
        return ledger  # what it could not write, the program says as it ends

    return Watchdog(
        path,
        telemetry,
        flush,
        cfg=cfg,
        recover=recover,
        dry_run=dry_run,
        observe_scan=observe_scan,
        say=say,
        also=also,
        retain_s=retain_s,
        threads=threads,
    ), close


class Agents:
    """Following the agent CLIs' files from the watchdog: where, and how."""

    def __init__(
        self,
        roots: Mapping[str, Path],
        *,
        keep_args: bool,
        thread: bool,
        say: Callable[[str], None] = lambda _m: None,
    ) -> None:
        self.roots = roots
        self.say = say
        self.keep_args = keep_args
        self.thread = thread  # the loop: a thread reads between scans; --once: before the scan
        self._lock = threading.Lock()

    def poll(self, watch: agent_files.AgentWatch, *, final: bool = False) -> None:
        with self._lock:
            watch.poll(final=final or not self.thread)

    def start(self, watch: agent_files.AgentWatch) -> Callable[[], None]:
        """Start following; return what stops it (and saves every file's place)."""
        if not self.thread:
            return watch.close
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(FOLLOW_POLL_S):
                try:
                    self.poll(watch)
                except Exception as exc:
                    self.say(f"following the agent CLIs' files: {type(exc).__name__}: {exc}")

        t = threading.Thread(target=run, name="turnwatch-agents", daemon=True)
        t.start()

        def halt() -> None:
            stop.set()
            t.join()
            with self._lock:
                watch.close()

        return halt


#: How often the loop's follower looks at the agent CLIs' files.
FOLLOW_POLL_S = 0.5


def once(
    path: Path,
    cfg: Config,
    *,
    recover: bool,
    dry_run: bool,
    say: Callable[[str], None],
    agents: Agents | None = None,
    retain_s: float | None = None,
    threads: Threads | None = None,
) -> Cycle:
    dog, close = make_watchdog(
        path,
        cfg,
        recover=recover,
        dry_run=dry_run,
        say=say,
        agents=agents,
        write=recover and not dry_run,
        retain_s=retain_s,
        threads=threads,
    )
    try:
        if recover:
            import asyncio  # a recovery awaits grace windows; a look awaits nothing (~30 ms)

            cycle = asyncio.run(dog.cycle())
        else:
            cycle = dog.look()
    finally:
        ledger = close()
    said_lost(ledger)
    return cycle


def loop(
    path: Path,
    cfg: Config,
    *,
    interval_s: float,
    recover: bool,
    dry_run: bool,
    metrics_addr: str | None,
    say: Callable[[str], None],
    agents: Agents | None = None,
    retain_s: float | None = None,
    threads: Threads | None = None,
) -> None:
    """Run until SIGINT/SIGTERM, serving the metrics (rebuilt from the ledger) if asked."""
    import asyncio

    from prometheus_client import CollectorRegistry

    from turnwatch.cli.metrics_server import build
    from turnwatch.exporters import http

    registry = CollectorRegistry()
    follower, metrics = build(path, registry, say)
    server = None
    if metrics_addr:  # first: a bad or busy address fails before anything is opened for writing
        follower.poll()
        server, port = http.serve(registry, metrics_addr)
        say(f"metrics on {http.url(metrics_addr, port)}")
    try:
        dog, close = make_watchdog(
            path,
            cfg,
            recover=recover,
            dry_run=dry_run,
            say=say,
            observe_scan=metrics.scan.observe,
            agents=agents,
            retain_s=retain_s,
            threads=threads,
        )
    except BaseException:
        if server is not None:
            http.stop(server)
        raise

    log = ChangeLog()

    def after(cycle: Cycle) -> None:
        follower.poll()
        for line in log.lines(cycle):
            say(line)

    async def main() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await dog.run(interval_s, stop, after)

    try:
        asyncio.run(main())
    finally:
        if server is not None:
            http.stop(server)
        ledger = close()
    said_lost(ledger)


def _nothing(*_args: object) -> None:
    """A look's sink and flush: it records nothing."""
