"""A call's handle: waiting for its result is the waiter's own; cancelling the wait never
cancels the call (as ``asyncio.shield`` promised before a bare waiter replaced it, #31)."""

from __future__ import annotations

import asyncio

from tests.conftest import until
from turnwatch.runtime import HostResult, HostStatus, LocalHost, MemorySink, Outcome, Runtime
from turnwatch.runtime.tools.context import ToolContext
from turnwatch.testing import check_invariants


async def test_a_cancelled_wait_leaves_the_call_running_and_its_result_for_others() -> None:
    release = asyncio.Event()
    started: list[str] = []

    async def slow(ctx: ToolContext) -> HostResult:
        started.append(ctx.request.call_id)
        await release.wait()
        return HostResult(HostStatus.OK, "written")

    host = LocalHost(subreaper=False)
    host.register("slow", slow)
    sink = MemorySink()
    rt = Runtime(host, sink=sink)
    turn = rt.start_turn("s")
    handle = turn.request("slow", {}, tool_class="mutating")
    first = asyncio.ensure_future(handle.result())
    second = asyncio.ensure_future(handle.result())
    await until(lambda: started, what="the call to start")
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert first.cancelled()
    assert handle.outcome is None  # the call itself runs on
    release.set()
    got = await asyncio.wait_for(second, 5)
    assert got.outcome is Outcome.COMPLETED
    assert (await handle.result()).outcome is Outcome.COMPLETED  # done: at once, again
    await turn.finish()
    check_invariants(sink.events)


async def test_a_wait_cancelled_with_the_result_already_set_still_cancels_the_waiter() -> None:
    """The result and the cancel in the same loop pass: the waiter is cancelled, as with
    shield, and the result stays for the next one who asks."""
    release = asyncio.Event()

    async def slow(ctx: ToolContext) -> HostResult:
        await release.wait()
        return HostResult(HostStatus.OK, "ok")

    host = LocalHost(subreaper=False)
    host.register("slow", slow)
    rt = Runtime(host, sink=MemorySink())
    turn = rt.start_turn("s")
    handle = turn.request("slow", {}, tool_class="extension")
    waiting = asyncio.ensure_future(handle.result())
    await asyncio.sleep(0.01)
    release.set()
    waiting.cancel()
    outcome = await asyncio.gather(waiting, return_exceptions=True)
    assert waiting.cancelled() or outcome[0].outcome is Outcome.COMPLETED  # type: ignore[union-attr]
    assert (await handle.result()).outcome is Outcome.COMPLETED
    await turn.finish()
