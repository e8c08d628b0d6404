"""The ``turnwatch`` console script (and ``python -m turnwatch``): start-up with the cyclic
garbage collector paused.

Starting a command creates hundreds of thousands of objects that live as long as the process
(modules, classes, typer's and pydantic's parameter adapters) and almost no cyclic garbage. The
collector, left on, walks them again and again while they are made: ~70 young and a few older
collections before ``turnwatch sessions`` reads its ledger, 20-30 ms of a start (#31). So the
console script pauses it before its first import and resumes it when the command itself begins
(:func:`resume_gc`, which ``app.build`` wraps every command in): a command that runs for months
(``watch``, ``serve``) collects as any program does.

Only the console script pauses it: ``turnwatch.cli.app.main`` called in another program's
process (a test, an embedding) never touches that program's collector.
"""

from __future__ import annotations

import gc

__all__ = ["main", "resume_gc"]

_paused = False


def resume_gc() -> None:
    """Resume the collector if the console script paused it (else nothing). What start-up made
    is frozen first: it lives as long as the process, so no collection need walk it again, and
    the first young collection is not one over everything made while paused."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()


def main() -> None:
    """Console-script entry point: :func:`turnwatch.cli.app.main`, started with the collector
    paused. A collector already off (the host's choice) is left off, and never turned on."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True
    try:
        from turnwatch.cli.app import main as run

        run()
    finally:
        resume_gc()  # a usage error exits before any command began
