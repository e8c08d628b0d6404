"""An MCP server's stderr, kept only as far as a failed start needs it.

A server that fails to start usually says why on stderr (a missing module, a bad flag); what it
writes later is its own diagnostics. Its stderr is a pipe read on the event loop: the last
:data:`TAIL_BYTES` are kept, the rest dropped, so memory stays bounded however long the server
runs, and the server never blocks on a full pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TextIO

#: What is kept of a server's stderr: enough for its last complaint.
TAIL_BYTES = 1000


class StderrTail:
    """The read end of a server's stderr; :attr:`file` is what the server is given."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        r, w = os.pipe()
        os.set_blocking(r, False)
        self._r: int | None = r
        self._loop = loop
        #: The write end, for the server's process (``stdio_client``'s ``errlog``).
        self.file: TextIO = os.fdopen(w, "w")
        self._tail = bytearray()
        loop.add_reader(r, self._read)

    def _read(self) -> bool:
        """Read what is there; False once nothing more will come (or the pipe is closed)."""
        if self._r is None:
            return False
        try:
            data = os.read(self._r, 65536)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self._loop.remove_reader(self._r)
            return False
        self._tail += data
        del self._tail[:-TAIL_BYTES]
        return True

    def text(self) -> str:
        """The last of what the server wrote, on one line."""
        while self._read():
            pass
        return " ".join(self._tail.decode(errors="replace").split())

    def close(self) -> None:
        if self._r is not None:
            self._loop.remove_reader(self._r)
            os.close(self._r)
            self._r = None
        with contextlib.suppress(OSError):
            self.file.close()
