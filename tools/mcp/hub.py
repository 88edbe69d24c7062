"""McpHub: the MCP servers of one session on one background event loop.

Tools are synchronous and run in worker threads; the SDK is async. The hub owns a thread
running its own asyncio loop for the session's whole life (started with the session, closed
at shutdown), so server connections outlive single calls and never touch the agent's loop.
A call is a coroutine handed to that loop; the worker thread waits for it, polling
`ctx.cancel` so an interrupt cancels the request (the SDK sends notifications/cancelled).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..json_types import JSONObject
from .config import McpConfig
from .connection import ServerConnection
from .state import McpCallError, ServerStatus

if TYPE_CHECKING:
    from mcp_types import CallToolResult, GetPromptResult, Prompt, ReadResourceResult

    from ..sandbox.runner import Sandbox

T = TypeVar("T")


class McpCancelled(Exception):
    """The user interrupted the call."""


class McpHub:
    def __init__(
        self,
        config: McpConfig,
        *,
        sandbox: Sandbox | None,
        workspace: Path,
        client_version: str = "0",
        media_dir: Path | None = None,
    ) -> None:
        self.config = config
        self.media_dir = media_dir  # where images from results are saved (None: not saved)
        self._servers = {
            s.name: ServerConnection(
                s,
                sandbox=sandbox,
                workspace=workspace,
                client_version=client_version,
                oauth_dir=config.oauth_dir,
            )
            for s in config.servers
            if s.enabled
        }
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="m3agent-mcp", daemon=True
        )
        self._thread.start()
        self._closed = False

    # ---- lifecycle ---------------------------------------------------------------------

    def start_all(self) -> dict[str, str]:
        """Connects every server at once; {name: error} for those that failed to start."""

        async def start_one(conn: ServerConnection) -> tuple[str, str]:
            try:
                await conn.ensure_started()
                return conn.cfg.name, ""
            except McpCallError as e:
                return conn.cfg.name, str(e)

        async def start() -> list[tuple[str, str]]:
            return await asyncio.gather(*(start_one(c) for c in self._servers.values()))

        longest = max((c.cfg.startup_timeout_s for c in self._servers.values()), default=1.0)
        results = self._submit(start()).result(timeout=longest + 30.0)
        return {name: err for name, err in results if err}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        async def stop() -> None:
            await asyncio.gather(
                *(c.close() for c in self._servers.values()), return_exceptions=True
            )

        try:
            self._submit(stop()).result(timeout=30.0)
        except (FutureTimeout, RuntimeError):
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self._loop.close()

    # ---- what the tools use ------------------------------------------------------------

    def servers(self) -> list[ServerConnection]:
        return list(self._servers.values())

    def server(self, name: str) -> ServerConnection | None:
        return self._servers.get(name)

    def statuses(self) -> list[ServerStatus]:
        return [c.status() for c in self._servers.values()]

    def call_tool(
        self,
        server: str,
        tool: str,
        arguments: JSONObject,
        *,
        timeout_s: float,
        cancel: threading.Event | None = None,
    ) -> CallToolResult:
        conn = self._conn(server)
        return self._wait(conn.call_tool(tool, arguments, timeout_s), timeout_s, cancel)

    def read_resource(
        self, server: str, uri: str, *, timeout_s: float, cancel: threading.Event | None = None
    ) -> ReadResourceResult:
        conn = self._conn(server)
        return self._wait(conn.read_resource(uri, timeout_s), timeout_s, cancel)

    def list_prompts(self, server: str, *, timeout_s: float) -> list[Prompt]:
        return self._wait(self._conn(server).list_prompts(timeout_s), timeout_s, None)

    def get_prompt(
        self, server: str, name: str, arguments: dict[str, str], *, timeout_s: float
    ) -> GetPromptResult:
        conn = self._conn(server)
        return self._wait(conn.get_prompt(name, arguments, timeout_s), timeout_s, None)

    # ---- internals ---------------------------------------------------------------------

    def _conn(self, name: str) -> ServerConnection:
        conn = self._servers.get(name)
        if conn is None:
            raise McpCallError(f"no MCP server named {name!r} in this session")
        return conn

    def _submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        if self._closed and not self._loop.is_running():
            coro.close()
            raise RuntimeError("the MCP hub is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _wait(
        self, coro: Coroutine[Any, Any, T], timeout_s: float, cancel: threading.Event | None
    ) -> T:
        fut = self._submit(coro)
        # The connection enforces the timeout (and restarts the server); this bound is only
        # a backstop: a start that takes its own startup timeout, then the call's.
        cfg_slack = max((c.cfg.startup_timeout_s for c in self._servers.values()), default=0)
        deadline = timeout_s + cfg_slack + 30.0
        waited = 0.0
        while True:
            try:
                return fut.result(timeout=0.05)
            except FutureTimeout:
                waited += 0.05
                if cancel is not None and cancel.is_set():
                    fut.cancel()
                    raise McpCancelled("interrupted by the user") from None
                if waited > deadline:
                    fut.cancel()
                    raise McpCallError("the MCP call did not finish in time") from None
