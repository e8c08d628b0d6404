"""Daemon threads, reused: the thread pool the wrappers hand their frameworks for sync tools
(a thread a stop abandons never holds the interpreter open). Nothing here imports a framework."""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any


class DaemonExecutor(concurrent.futures.ThreadPoolExecutor):
    """Daemon threads, reused: one a stop abandons cannot hold the interpreter open.

    A ``ThreadPoolExecutor`` so that it can be an event loop's default executor (the OpenAI
    Agents SDK runs sync tools with ``asyncio.to_thread``), whose shutdown then waits for none.
    A job goes to an idle thread if there is one, else to a new thread: a thread blocked in an
    abandoned tool never delays the next job. Idle threads end after ``idle_s``. (A thread per
    job cost pydantic-ai ~0.8 ms a run here: it runs a sync model function in its executor.)
    """

    def __init__(self, idle_s: float = 30.0) -> None:
        super().__init__(max_workers=1)  # the base's own pool is never used
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # one token per idle thread
        self._idle_s = idle_s

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def job() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)

        self._jobs.put(job)
        if not self._idle.acquire(blocking=False):  # no idle thread took it on: a new one
            threading.Thread(target=self._work, name="turnwatch-sync-tool", daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self._idle_s)
            except queue.Empty:
                if self._idle.acquire(blocking=False):
                    return  # idle too long: this thread's token taken back, it ends
                continue  # a submit counted on an idle thread: its job is on the way
            job()
            del job  # an idle thread must not keep its last job's arguments and result alive
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return  # nothing to wait for: every thread is a daemon


DAEMONS = DaemonExecutor()
