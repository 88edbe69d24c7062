"""One MCP server's connection, on the hub's event loop: start, list, call, read, restart.

A holder task owns the SDK `Client` for the connection's whole life (the SDK's anyio task
groups must be entered and left by the same task); calls run as their own tasks against the
holder's session. Whatever breaks the connection (the process exits, a call times out, a line
on stdout is not JSON-RPC) ends the holder, marks the server failed with one line saying why,
and the next call starts it again.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..json_types import JSONObject
from .config import McpServerConfig, Transport
from .launch import hidden_hint, hidden_paths, open_transport, stderr_tail, stdio_parameters
from .oauth import McpLoginRequired
from .state import McpCallError, ServerState, ServerStatus, one_line

if TYPE_CHECKING:  # the SDK is imported when a server starts
    from mcp import Client
    from mcp.client.session import IncomingMessage
    from mcp_types import CallToolResult, GetPromptResult, Prompt, ReadResourceResult
    from mcp_types import Tool as ListedTool

    from ..sandbox.cgroup import Cgroup
    from ..sandbox.runner import Sandbox

T = TypeVar("T")

# How long a stopping server may take before we stop waiting for it (the SDK kills it).
_STOP_GRACE_S = 8.0
_MAX_TOOL_PAGES = 50


class ServerConnection:
    def __init__(
        self,
        cfg: McpServerConfig,
        *,
        sandbox: Sandbox | None,
        workspace: Path,
        client_version: str = "0",
        oauth_dir: Path | None = None,
    ) -> None:
        self.cfg = cfg
        self.oauth_dir = oauth_dir
        self.needs_login = False  # the last start failed because the server wants an OAuth login
        self.sandbox = sandbox
        self.workspace = workspace
        self.client_version = client_version
        self.state = ServerState.STOPPED
        self.detail = ""
        self.tools: list[ListedTool] = []  # as listed at the first start
        self.tools_changed = False
        self.restarts = 0
        self.protocol = ""
        self._client: Client | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._broken: asyncio.Event | None = None
        self._broken_reason = ""
        self._lock: asyncio.Lock | None = None
        self._run_dir: Path | None = None
        self._cgroup: Cgroup | None = None  # the stdio server's pids cgroup, removed when it stops
        # a reset's shutdown, awaited before a start
        self._stopping: asyncio.Task[None] | None = None

    # ---- lifecycle ---------------------------------------------------------------------

    async def ensure_started(self) -> None:
        """Connects (initialize + tools/list) unless connected; raises McpCallError."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            await self._finish_stopping()
            alive = self._holder is not None and not self._holder.done()
            broken = self._broken is not None and self._broken.is_set()
            if self.state is ServerState.READY and alive and not broken:
                return
            if self.state is ServerState.FAILED or self._holder is not None:
                await self._stop_holder()
                self.restarts += 1
            await self._start()

    async def _start(self) -> None:
        self.state = ServerState.STARTING
        self._stop, self._broken, self._broken_reason = asyncio.Event(), asyncio.Event(), ""
        self._run_dir = Path(tempfile.mkdtemp(prefix=f"m3agent-mcp-{self.cfg.name}-"))
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._holder = asyncio.create_task(self._hold(ready), name=f"mcp-{self.cfg.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.cfg.startup_timeout_s)
        except TimeoutError:
            self._fail(f"did not finish starting within {self.cfg.startup_timeout_s:g}s")
            await self._stop_holder()
            raise McpCallError(self._message()) from None
        except McpCallError:
            await self._stop_holder()
            raise

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        from mcp import Client
        from mcp_types import Implementation

        assert self._run_dir is not None and self._stop is not None
        err_path = self._run_dir / "stderr.log"
        try:
            stdio = None
            if self.cfg.transport is Transport.STDIO:
                stdio, self._cgroup = stdio_parameters(
                    self.cfg, self.sandbox, self._run_dir, self.workspace
                )
            with open(err_path, "w", encoding="utf-8") as errlog:
                transport = open_transport(
                    self.cfg,
                    stdio=stdio,
                    errlog=errlog,
                    on_garbage=self._garbage,
                    on_closed=self._closed,
                    oauth_dir=self.oauth_dir,
                )
                client = Client(
                    transport,
                    mode="auto",
                    message_handler=self._on_message,
                    cache=None,
                    client_info=Implementation(name="m3agent", version=self.client_version),
                )
                async with client:
                    self._client = client
                    self.protocol = client.protocol_version
                    listing = await self._list_tools(client)
                    if not self.tools:  # the session's tool set is the first listing
                        self.tools = listing
                    elif _names(listing) != _names(self.tools):
                        self.tools_changed = True
                    self.state, self.detail = ServerState.READY, self._describe(client)
                    ready.set_result(None)
                    listen = self._maybe_listen(client)
                    try:
                        await self._stop.wait()
                    finally:
                        if listen is not None:
                            listen.cancel()
                            await asyncio.gather(listen, return_exceptions=True)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001 - every way a server can fail is reported
            login = _find_login(e)
            self.needs_login = login is not None
            why = str(login) if login is not None else one_line(e)
            tail = stderr_tail(err_path)
            hidden = hidden_paths(self.cfg, self.sandbox, self.workspace)
            hint = f"; {hidden_hint(hidden)}" if hidden else ""
            self._fail(f"{why}" + (f" (stderr: {tail})" if tail else "") + hint)
            if not ready.done():
                ready.set_exception(McpCallError(self._message()))
        finally:
            self._client = None
            if self.state is ServerState.READY:
                self.state = ServerState.STOPPED
            if not ready.done():
                ready.set_exception(McpCallError(self._message()))

    def _maybe_listen(self, client: Client) -> asyncio.Task[None] | None:
        """On a 2026-era connection, list_changed arrives on a subscriptions/listen stream."""
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        caps = client.server_capabilities
        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS or not (
            caps.tools and caps.tools.list_changed
        ):
            return None

        async def listen() -> None:
            try:
                async with client.listen(tools_list_changed=True) as sub:
                    async for _event in sub:
                        self.tools_changed = True
            except Exception:  # a server without listen support keeps working without it
                pass

        return asyncio.create_task(listen())

    async def _stop_holder(self) -> None:
        holder, self._holder = self._holder, None
        if self._stop is not None:
            self._stop.set()
        if holder is not None and not holder.done():
            try:
                await asyncio.wait_for(asyncio.shield(holder), _STOP_GRACE_S)
            except (TimeoutError, Exception):
                holder.cancel()
                await asyncio.gather(holder, return_exceptions=True)
        if self._cgroup is not None:  # whatever the server left running ends here
            cgroup, self._cgroup = self._cgroup, None
            await asyncio.to_thread(cgroup.remove)
        if self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None

    async def _finish_stopping(self) -> None:
        stopping, self._stopping = self._stopping, None
        if stopping is not None:
            await asyncio.gather(stopping, return_exceptions=True)

    async def close(self) -> None:
        await self._finish_stopping()
        await self._stop_holder()
        if self.state is not ServerState.FAILED:
            self.state = ServerState.STOPPED

    # ---- events from the SDK -----------------------------------------------------------

    async def _on_message(self, message: IncomingMessage) -> None:
        from mcp_types import ServerNotification, ToolListChangedNotification

        if isinstance(message, ServerNotification):
            message = getattr(message, "root", message)
        if isinstance(message, ToolListChangedNotification):
            self.tools_changed = True
        elif isinstance(message, Exception):
            self._garbage(message)

    def _garbage(self, error: Exception) -> None:
        self._break(f"sent something that is not JSON-RPC ({one_line(error)[:120]})")

    def _closed(self) -> None:
        self._break("closed the connection (the process exited?)")

    def _break(self, reason: str) -> None:
        if self._broken is not None and not self._broken.is_set():
            self._broken_reason = reason
            self._broken.set()

    def _fail(self, why: str) -> None:
        self.state, self.detail = ServerState.FAILED, why

    def _message(self) -> str:
        return f"MCP server {self.cfg.name}: {self.detail}"

    def _describe(self, client: Client) -> str:
        info = client.server_info
        who = f"{info.name} {info.version}".strip() if info is not None else "unnamed server"
        return f"{who}, protocol {client.protocol_version}"

    async def _list_tools(self, client: Client) -> list[ListedTool]:
        out: list[ListedTool] = []
        cursor: str | None = None
        for _ in range(_MAX_TOOL_PAGES):  # a paginator that never ends cannot hang the start
            page = await client.list_tools(cursor=cursor)
            out.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return out

    # ---- requests ----------------------------------------------------------------------

    async def call_tool(self, tool: str, arguments: JSONObject, timeout_s: float) -> CallToolResult:
        """The CallToolResult; McpCallError when the server gave none (and it will restart)."""
        return await self._request(
            lambda c: c.call_tool(tool, arguments, read_timeout_seconds=timeout_s),
            timeout_s,
            f"{tool}",
        )

    async def read_resource(self, uri: str, timeout_s: float) -> ReadResourceResult:
        return await self._request(lambda c: c.read_resource(uri), timeout_s, f"reading {uri}")

    async def list_prompts(self, timeout_s: float) -> list[Prompt]:
        """The server's prompts (issue 23: they become `/mcp__SERVER__PROMPT` commands)."""
        page = await self._request(lambda c: c.list_prompts(), timeout_s, "listing prompts")
        return list(page.prompts)

    async def get_prompt(
        self, name: str, arguments: dict[str, str], timeout_s: float
    ) -> GetPromptResult:
        return await self._request(
            lambda c: c.get_prompt(name, arguments), timeout_s, f"prompt {name}"
        )

    async def _request(
        self, send: Callable[[Client], Coroutine[Any, Any, T]], timeout_s: float, what: str
    ) -> T:
        from mcp.shared.exceptions import MCPError

        await self.ensure_started()
        client, broken = self._client, self._broken
        assert client is not None and broken is not None
        task = asyncio.create_task(send(client))
        watch = asyncio.create_task(broken.wait())
        try:
            done, _ = await asyncio.wait(
                {task, watch}, timeout=timeout_s + 1.0, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:  # the user interrupted: the SDK tells the server
            task.cancel()
            watch.cancel()
            await asyncio.gather(task, watch, return_exceptions=True)
            raise
        watch.cancel()
        if task in done:
            try:
                return task.result()
            except MCPError as e:
                # -32000 connection closed, -32001 timeout: the server is gone or stuck.
                if e.error.code in (-32000, -32001):
                    reason = (
                        f"did not answer within {timeout_s:g}s"
                        if e.error.code == -32001
                        else "closed the connection (the process exited?)"
                    )
                    await self._reset(reason)
                    raise McpCallError(f"{self._message()}; {what} got no result") from None
                raise McpCallError(
                    f"MCP server {self.cfg.name}: {what} failed: {e.error.message}"
                ) from None
            except Exception as e:
                await self._reset(f"answered with something unusable: {one_line(e)[:160]}")
                raise McpCallError(f"{self._message()}; {what} got no result") from None
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        reason = self._broken_reason if broken.is_set() else f"did not answer within {timeout_s:g}s"
        await self._reset(reason)
        raise McpCallError(f"{self._message()}; {what} got no result")

    async def _reset(self, reason: str) -> None:
        """Ends the connection; the next call starts the server again."""
        tail = stderr_tail(self._run_dir / "stderr.log") if self._run_dir else ""
        self._fail(reason + (f" (stderr: {tail})" if tail else ""))
        # The process is stopped in the background (the SDK gives it seconds to exit): the
        # model gets its error now, and the next start waits for the stop to finish.
        if self._stopping is None:
            self._stopping = asyncio.create_task(self._stop_holder())

    def status(self) -> ServerStatus:
        names = tuple(t.name for t in self.tools if self.cfg.wants_tool(t.name))
        return ServerStatus(
            self.cfg.name, self.state, self.detail, names, self.tools_changed, self.restarts
        )


def _names(tools: list[ListedTool]) -> list[str]:
    return [t.name for t in tools]


def _find_login(e: BaseException | None, depth: int = 0) -> McpLoginRequired | None:
    """The McpLoginRequired inside what the SDK raised (groups, causes), if any."""
    if e is None or depth > 8:
        return None
    if isinstance(e, McpLoginRequired):
        return e
    if isinstance(e, BaseExceptionGroup):
        for x in e.exceptions:
            found = _find_login(x, depth + 1)
            if found is not None:
                return found
    return _find_login(e.__cause__ or e.__context__, depth + 1)
