"""The daemon executor both wrappers run sync tools in: reused threads, never a held exit."""

from __future__ import annotations

import gc
import threading
import weakref

from tests.conftest import wait_until
from turnwatch.integrations.daemon_threads import DaemonExecutor


def test_threads_are_daemons_and_are_reused() -> None:
    pool = DaemonExecutor()
    threads = [pool.submit(threading.current_thread).result(timeout=5) for _ in range(20)]
    assert all(t.daemon for t in threads)
    assert all(t is threads[0] for t in threads)  # one after another: the same idle thread


def test_a_job_blocked_for_good_never_delays_the_next() -> None:
    pool = DaemonExecutor()
    hung = threading.Event()
    blocked = pool.submit(hung.wait)  # an abandoned sync tool, blocked on a hung mount
    worker = pool.submit(threading.current_thread).result(timeout=5)
    assert not blocked.done()
    assert worker.daemon
    hung.set()
    assert blocked.result(timeout=5) is True


def test_an_exception_is_the_future_s_and_the_thread_goes_on() -> None:
    pool = DaemonExecutor()

    def fail() -> None:
        raise OSError("gone")

    failed = pool.submit(fail)
    assert isinstance(failed.exception(timeout=5), OSError)
    assert pool.submit(lambda: 42).result(timeout=5) == 42


def test_idle_threads_end_and_new_jobs_still_run() -> None:
    pool = DaemonExecutor(idle_s=0.05)
    first = pool.submit(threading.current_thread).result(timeout=5)
    wait_until(lambda: not first.is_alive(), timeout=5, what="the idle thread to end")
    assert pool.submit(lambda: "again").result(timeout=5) == "again"
    pool.shutdown(wait=True)  # waits for nothing


class _Held:
    """Stands for a sync tool's arguments (a run context) and its result."""


def _tool(context: _Held) -> _Held:
    return _Held()


def test_an_idle_thread_keeps_nothing_of_its_last_job() -> None:
    pool = DaemonExecutor()
    arg = _Held()
    future = pool.submit(_tool, arg)
    out = future.result(timeout=5)
    arg_ref, out_ref = weakref.ref(arg), weakref.ref(out)
    del arg, out, future

    def let_go() -> bool:
        gc.collect()
        return arg_ref() is None and out_ref() is None

    # The thread lets go once it is idle again, a moment after the result was handed over.
    wait_until(let_go, timeout=5, what="the idle thread to let its last job go")
