"""The control client against a peer that answers what it should not.

The control path comes from the ledger: whatever listens there now (a runtime of another
version, a hung one, another program that took the path) answers. A reply that is not a JSON-RPC
answer is a failed call, said in one line, never an exception that ends ``watch``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from tests.watchdog.helpers import Recorder
from turnwatch import names
from turnwatch.runtime.model import RecoveryResult
from turnwatch.tracing.ledger import Ledger, connect, read_events
from turnwatch.watchdog import control_client
from turnwatch.watchdog.loop import Watchdog
from turnwatch.watchdog.scan import Config


class Answering:
    """A unix socket that answers every request line with ``reply`` (a real peer, in a
    thread)."""

    def __init__(self, path: Path, reply: bytes) -> None:
        self.path, self.reply = path, reply
        self.asked = threading.Event()  # a request arrived
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        self._sock.listen()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            with conn, contextlib.suppress(ConnectionError):
                conn.recv(65536)
                self.asked.set()
                # A client that read what it takes and hung up (a reply past its bound) ends
                # this send with a broken pipe: the peer goes on accepting.
                conn.sendall(self.reply)

    def close(self) -> None:
        self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(timeout=5)


Make = Callable[[bytes], Answering]


@pytest.fixture
def answering(tmp_path: Path) -> Iterator[Make]:
    made: list[Answering] = []

    def make(reply: bytes) -> Answering:
        made.append(Answering(tmp_path / f"control{len(made)}.sock", reply))
        return made[-1]

    yield make
    for a in made:
        a.close()


MALFORMED = [
    pytest.param(b"SSH-2.0-OpenSSH_9.2\r\n", id="not-json"),
    pytest.param(b"[1, 2]\n", id="a-list"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 1, "error": 5}\n', id="error-not-an-object"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 1, "error": {}}\n', id="error-without-message"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 1}\n', id="neither-result-nor-error"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 1, "result": {}}\n', id="abort-without-receipt"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 1, "result": 7}\n', id="abort-result-not-object"),
    pytest.param(b"\xff\xfe\n", id="not-utf8"),
]


@pytest.mark.parametrize("reply", MALFORMED)
def test_a_reply_that_is_not_an_answer_is_a_control_error(answering: Make, reply: bytes) -> None:
    peer = answering(reply)
    with pytest.raises(control_client.ControlError) as err:
        control_client.abort(str(peer.path), "s1", timeout=5)
    said = str(err.value)
    assert said.startswith(str(peer.path)), said
    assert "\n" not in said


def test_an_error_reply_says_the_runtimes_message(answering: Make) -> None:
    peer = answering(
        b'{"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "unknown session"}}\n'
    )
    with pytest.raises(control_client.ControlError, match="unknown session"):
        control_client.abort(str(peer.path), "s1", timeout=5)


async def test_watch_goes_on_past_a_control_socket_that_answers_garbage(
    tmp_path: Path, answering: Make
) -> None:
    """Two pinned sessions of a live runtime (this process): one's recorded control path answers
    garbage, the other's answers as a runtime does. The cycle recovers the second and records the
    first as failed; before, the first ended the whole watchdog."""
    garbage = answering(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    good = answering(b'{"jsonrpc": "2.0", "id": 1, "result": {"receipt": "joined"}}\n')
    path = tmp_path / "ledger.sqlite3"
    rec = Recorder(path)
    me = {"pid": os.getpid(), "create_time": psutil.Process().create_time()}
    for session, peer in (("a", garbage), ("b", good)):
        rec(
            names.RUNTIME_STARTED,
            session,
            200,
            attrs={**me, "mode": "adr", "control": str(peer.path)},
        )
        rec(names.TURN_STARTED, session, 120, turn=f"{session}.t1")
        rec(names.STOP_CLICKED, session, 100, turn=f"{session}.t1")
        rec(names.ABORT_RPC_RECEIVED, session, 100, turn=f"{session}.t1")
    rec.close()

    ledger = Ledger(path)
    dog = Watchdog(path, ledger, ledger.flush, cfg=Config(grace_s=1.0))
    cycle = await dog.cycle()
    ledger.close()

    results = {a.finding.session: a for a in cycle.actions}
    assert results["a"].result is RecoveryResult.FAILED
    assert "not a JSON-RPC reply" in results["a"].detail
    assert results["b"].result is RecoveryResult.OK
    conn = connect(path, readonly=True)
    said = {e.session: e.attrs for _s, e in read_events(conn) if e.kind == "watchdog.recovered"}
    conn.close()
    assert said["a"]["result"] == "failed"
    assert said["b"]["result"] == "ok"


def test_a_reply_without_end_is_cut_off_at_its_bound(answering: Make) -> None:
    """A peer that streams and never ends its line is read to the bound, not into memory
    until the timeout (before: all of it, then a timeout)."""
    peer = answering(b"x" * (control_client.MAX_REPLY_BYTES + 65536))
    with pytest.raises(control_client.ControlError, match="no line within"):
        control_client.abort(str(peer.path), "s1", timeout=30)


class Hung(Answering):
    """A runtime whose loop is stuck: it takes the request and answers nothing until let go."""

    def __init__(self, path: Path) -> None:
        self.let_go = threading.Event()
        super().__init__(path, b"")

    def _serve(self) -> None:
        try:
            conn, _ = self._sock.accept()
        except OSError:
            return
        with conn:
            conn.recv(65536)
            self.asked.set()
            self.let_go.wait(30)


def pinned(rec: Recorder, session: str, control: Path) -> None:
    me = {"pid": os.getpid(), "create_time": psutil.Process().create_time()}
    rec(names.RUNTIME_STARTED, session, 200, attrs={**me, "mode": "adr", "control": str(control)})
    rec(names.TURN_STARTED, session, 120, turn=f"{session}.t1")
    rec(names.STOP_CLICKED, session, 100, turn=f"{session}.t1")
    rec(names.ABORT_RPC_RECEIVED, session, 100, turn=f"{session}.t1")


@pytest.mark.parametrize(("stuck", "fine"), [("a", "b"), ("b", "a")])
async def test_a_hung_runtime_does_not_hold_back_the_other_recoveries(
    tmp_path: Path, answering: Make, stuck: str, fine: str
) -> None:
    """Two pinned sessions: one's runtime takes the stop and never answers (its loop stuck),
    the other's answers. Recoveries ran one after the other, so a finding behind the stuck one
    waited for its timeout (60 s; behind a process's grace window, 10 s), whichever order the
    scan gave them in."""
    hung = Hung(tmp_path / "hung.sock")
    good = answering(b'{"jsonrpc": "2.0", "id": 1, "result": {"receipt": "joined"}}\n')
    path = tmp_path / "ledger.sqlite3"
    rec = Recorder(path)
    pinned(rec, fine, good.path)
    pinned(rec, stuck, hung.path)
    rec.close()
    ledger = Ledger(path)
    dog = Watchdog(path, ledger, ledger.flush, cfg=Config(grace_s=1.0))
    try:
        cycle = asyncio.ensure_future(dog.cycle())
        assert await asyncio.to_thread(hung.asked.wait, 10)
        asked_meanwhile = await asyncio.to_thread(good.asked.wait, 10)
        hung.let_go.set()
        done = await cycle
    finally:
        hung.let_go.set()
        hung.close()
        ledger.close()
    assert asked_meanwhile
    results = {a.finding.session: a.result for a in done.actions}
    assert results == {stuck: RecoveryResult.FAILED, fine: RecoveryResult.OK}
