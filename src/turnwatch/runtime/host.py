"""The local host: runs real tools in this process, behind the typed message boundary.

Aborts are matched to calls by ``(session, call_id, tool)``. One that arrives before its call
registers lands in the abort registry (Bash: an expiring tombstone), and the call it names never
starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from turnwatch.runtime.clock import REAL, Clock
from turnwatch.runtime.protocol import (
    AbortRequest,
    ExecuteRequest,
    HostResult,
    HostStatus,
    MessageCallback,
    Reaped,
    TurnAbortRequest,
)
from turnwatch.runtime.registry import AbortRegistry
from turnwatch.runtime.tools import files, plugins, process
from turnwatch.runtime.tools.containment import Containers
from turnwatch.runtime.tools.context import ToolContext, ToolFn

BUILTIN_TOOLS: Mapping[str, ToolFn] = {
    "Read": files.read,
    "Glob": files.glob,
    "Grep": files.grep,
    "Write": files.write,
    "Edit": files.edit,
    "Bash": process.bash,
    "GenerateImages": process.generate_images,
}

Key = tuple[str, str, str]

if TYPE_CHECKING:
    from turnwatch.runtime.tools.mcp import McpServer, McpServerConfig


async def _call_mcp(server: McpServer, tool: str, ctx: ToolContext) -> HostResult:
    return await server.call(ctx, tool)


class LocalHost:
    """Runs the built-in tools, plus any tool registered with :meth:`register`.

    Process tools run each in a cgroup of its own where a writable cgroup2 hierarchy can be had
    (``containment="auto"``, the default; ``"cgroup"`` insists, ``"process_group"`` never tries),
    else in a process group of their own. On Linux the host makes this process a child
    subreaper, so a tool's grandchild that calls ``setsid`` re-parents here, is still found, and
    is reaped once it exits.
    """

    def __init__(
        self,
        *,
        subreaper: bool = True,
        registry: AbortRegistry | None = None,
        containment: str = "auto",
        clock: Clock = REAL,
    ) -> None:
        self.tools: dict[str, ToolFn] = dict(BUILTIN_TOOLS)
        self.registry = registry or AbortRegistry()
        self.containers = Containers.create(containment, subreaper=subreaper)
        self.clock = clock
        self._inflight: dict[Key, ToolContext] = {}
        self._mcp: list[McpServer] = []

    def register(self, name: str, fn: ToolFn) -> None:
        """Add a tool under ``name`` (the runtime treats unknown names as ``extension``)."""
        self.tools[name] = fn

    def register_plugin(self, name: str, plugin: plugins.Plugin) -> None:
        """Add a plugin tool (class ``extension``: awaited on a stop)."""
        self.register(name, plugins.as_tool(plugin))

    def load_plugins(self) -> list[str]:
        """Register every plugin of the ``turnwatch.plugins`` entry point group."""
        found = plugins.discover()
        for name, plugin in found.items():
            self.register_plugin(name, plugin)
        return sorted(found)

    async def add_mcp_server(self, config: McpServerConfig) -> list[str]:
        """Start an MCP server over stdio and register its tools as ``mcp__{server}__{tool}``."""
        from turnwatch.runtime.tools.mcp import McpServer

        server = await McpServer(config).start()
        self._mcp.append(server)
        for runtime_name, tool in server.names().items():
            self.register(runtime_name, functools.partial(_call_mcp, server, tool))
        return sorted(server.names())

    @property
    def subreaper(self) -> bool:
        """Whether this process is a child subreaper (orphans of tools re-parent here)."""
        return self.containers.subreaper

    @property
    def containment(self) -> str:
        """``cgroup`` or ``process_group``: how process calls are kept together here."""
        return self.containers.mode.value

    async def close(self) -> None:
        """Stop the MCP servers this host started; remove its cgroup parent if empty."""
        for server in self._mcp:
            await server.close()
        self._mcp.clear()
        self.containers.close()

    async def execute(self, request: ExecuteRequest, notify: MessageCallback) -> HostResult:
        """``tools.execute``."""
        key = (request.session, request.call_id, request.tool)
        early = self.registry.take(request.session, request.turn, request.call_id, request.tool)
        if early is not None:
            return HostResult(HostStatus.ABORTED, error=f"aborted before start by {early.source}")
        fn = self.tools.get(request.tool)
        if fn is None:
            known = ", ".join(sorted(self.tools))
            return HostResult(
                HostStatus.ERROR, error=f"unknown tool {request.tool!r}; tools: {known}"
            )
        ctx = ToolContext(
            request,
            notify,
            asyncio.get_running_loop(),
            containers=self.containers,
            clock=self.clock,
        )
        self._inflight[key] = ctx
        try:
            return await fn(ctx)
        except files.ToolArgumentError as exc:
            return HostResult(HostStatus.ERROR, error=str(exc))
        except OSError as exc:
            return HostResult(HostStatus.ERROR, error=f"{type(exc).__name__}: {exc}")
        finally:
            with contextlib.suppress(KeyError):
                if self._inflight[key] is ctx:
                    del self._inflight[key]

    def abort(self, request: AbortRequest) -> None:
        """``tools.abort``: cancel the call it names, or remember it for a call yet to come."""
        ctx = self._inflight.get((request.session, request.call_id, request.tool))
        if ctx is not None and ctx.request.turn == request.turn:
            ctx.cancel(request)
            return
        self.registry.record(
            request.session, request.turn, request.call_id, request.tool, request.source
        )

    async def abort_turn(self, request: TurnAbortRequest) -> Sequence[Reaped]:
        """The turn's stop: end what its finished process calls left running (``cmd &``)."""
        return await self.containers.abort_turn(request)
