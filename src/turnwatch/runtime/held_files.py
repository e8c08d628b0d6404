"""Files this process holds open through SQLite (its ledger), which its own tools must not open.

A process loses every POSIX lock it holds on a file when it closes *any* descriptor of that
file (``fcntl`` semantics). SQLite's connections share theirs and are safe; a plain ``open`` is
not. A Read or a Grep of the ledger in the runtime's own process (an agent grepping its home
directory, the ledger under ``~/.local/state``) closed the file and dropped the ledger writer's
locks: the next other process to close the ledger took itself for the last one and deleted the
WAL from under the writer, whose commits nobody else saw again. The ledger names its file here;
the file tools pass it, its WAL and its shared memory by.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path

__all__ = ["held", "hold", "inodes", "release"]

#: The files SQLite keeps beside a database, each locked or mapped by its connections.
_BESIDE = ("", "-wal", "-shm", "-journal")
_held: Counter[str] = Counter()
_lock = threading.Lock()


def hold(path: Path) -> None:
    """``path`` (a database) is open through SQLite in this process until :func:`release`."""
    with _lock:
        _held[str(path)] += 1


def release(path: Path) -> None:
    """One :func:`hold` of ``path`` is over."""
    with _lock:
        _held[str(path)] -= 1
        if _held[str(path)] <= 0:
            del _held[str(path)]


def inodes() -> dict[tuple[int, int], str]:
    """The held files as they are now, by (device, inode): each database's, its WAL's, its
    shared memory's (a walk over many files takes this once, then one ``stat`` a file)."""
    with _lock:
        bases = list(_held)
    out: dict[tuple[int, int], str] = {}
    for base in bases:
        for suffix in _BESIDE:
            try:
                st = os.stat(base + suffix)
            except OSError:
                continue
            out[(st.st_dev, st.st_ino)] = base
    return out


def held(path: str | Path) -> str | None:
    """The database ``path`` is (or is a file of) while this process holds it, else None."""
    if not _held:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return inodes().get((st.st_dev, st.st_ino))
