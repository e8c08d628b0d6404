"""``tap_session``: an MCP session tapped once, and one of a shape it cannot tap left as it is.

The real taps are tested through the wrappers that use them (``test_sdk_mcp.py``,
``test_pydantic_ai_mcp.py``, ``test_google_adk_mcp.py``, real servers over stdio). What cannot
run here is an mcp of another shape than the one pinned: stood in for by a dispatcher that takes
no new attribute.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, cast

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from turnwatch.integrations.wrappers import tap_session


class Sealed:
    """A dispatcher whose attributes cannot be set (``__slots__``, as a future one might be)."""

    __slots__ = ()

    async def send_raw_request(self, method: str, params: Any, opts: Any = None) -> Any:
        return {}


class Session:
    def __init__(self, dispatcher: object) -> None:
        self._dispatcher = dispatcher


def test_a_session_it_cannot_tap_is_left_as_it_is_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sealed = Sealed()
    with caplog.at_level(logging.WARNING, logger="turnwatch.integrations"):
        for session in (Session(sealed), Session(Sealed()), Session(None)):
            tap_session(cast(ClientSession, session))  # no error: the run goes on
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if "Sealed" in m]) == 1
    assert len([m for m in said if "NoneType" in m]) == 1


async def test_a_session_is_tapped_once() -> None:
    server = StdioServerParameters(command=sys.executable, args=["-m", "turnwatch.testing_mcp"])
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tap_session(session)
        dispatcher: Any = session._dispatcher  # noqa: SLF001 - what tap_session taps
        tapped = dispatcher.send_raw_request
        tap_session(session)
        assert dispatcher.send_raw_request is tapped
        # Outside a wrapped call, a call is the SDK's own.
        result = await session.call_tool("deploy", {"seconds": 0})
        assert not result.is_error
