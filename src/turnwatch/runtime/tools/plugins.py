"""Plugin tools: Python callables run by the host, class ``extension``, policy ``await``.

A plugin is ``async def tool(args, cancel) -> str | Mapping``. ``cancel`` is an
:class:`asyncio.Event` set when a stop asks the call to end: a plugin may honour it (return early,
or raise :class:`PluginCancelled`) or not; either way the runtime waits for it to return.
Plugins are registered in code (``LocalHost.register_plugin``) or by the entry point group
``turnwatch.plugins`` (``LocalHost.load_plugins``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from importlib.metadata import entry_points
from typing import Any

from turnwatch.runtime.model import TurnwatchError
from turnwatch.runtime.protocol import HostResult, HostStatus, Started
from turnwatch.runtime.tools.context import ToolContext, ToolFn

ENTRY_POINT_GROUP = "turnwatch.plugins"

Plugin = Callable[[Mapping[str, Any], asyncio.Event], Awaitable[str | Mapping[str, Any]]]


class PluginCancelled(TurnwatchError):
    """Raised by a plugin that honoured the cancellation before finishing."""


class PluginError(TurnwatchError, ImportError):
    """A plugin of the entry point group that could not be loaded; says which, from where."""


def as_tool(plugin: Plugin) -> ToolFn:
    """Adapt a plugin to the host's tool interface."""

    async def run(ctx: ToolContext) -> HostResult:
        cancel = asyncio.Event()
        ctx.notify(Started())
        watcher = asyncio.ensure_future(_forward(ctx, cancel))
        try:
            out = await plugin(ctx.args, cancel)
        except PluginCancelled as exc:
            return HostResult(HostStatus.CANCELLED_BY_SERVER, error=str(exc) or "cancelled")
        finally:
            watcher.cancel()
        if isinstance(out, str):
            return HostResult(HostStatus.OK, out)
        return HostResult(HostStatus.OK, str(out.get("text", "")), data=dict(out))

    return run


async def _forward(ctx: ToolContext, cancel: asyncio.Event) -> None:
    await ctx.abort_arrived.wait()
    cancel.set()


def discover() -> dict[str, Plugin]:
    """Plugins installed under the entry point group, by name; a :class:`PluginError` names
    the first that could not be loaded (none is then: a runtime missing a tool it was given
    would say so only when the model asked for it)."""
    found: dict[str, Plugin] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = f", from {ep.dist.name} {ep.dist.version}" if ep.dist is not None else ""
        try:
            loaded = ep.load()
        except Exception as exc:
            raise PluginError(
                f"plugin {ep.name!r} ({ep.value}{dist}) could not be loaded: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        found[ep.name] = loaded
    return found
