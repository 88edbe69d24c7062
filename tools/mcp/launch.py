"""How a server is reached: a stdio server's command under the session's sandbox, or an
HTTP client with the server's headers. Both give an SDK transport (an async context manager
of read/write streams), wrapped so that a line the server garbles is noticed at once."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import anyio

from ..host_programs import command_path
from ..sandbox import boot
from ..sandbox.cgroup import Cgroup
from ..sandbox.policy import SandboxLayer
from ..sandbox.runner import Sandbox, SandboxUnavailable
from .config import McpServerConfig, Transport
from .entry_rules import loader_variable

if TYPE_CHECKING:  # the SDK is imported when a server starts
    from mcp.client.stdio import StdioServerParameters

# A server lives for the whole session: the per-command CPU budget would end it mid-session.
_SERVER_CPU_S = 7 * 24 * 3600


def server_sandbox(session: Sandbox, cfg: McpServerConfig) -> Sandbox:
    """The session's policy with this server's network setting and a session-long CPU limit."""
    policy = session.policy.with_(
        network=cfg.network, limits=replace(session.policy.limits, cpu_s=_SERVER_CPU_S)
    )
    return Sandbox(policy, session.report)


# The entry's own variables travel to the server as one inert JSON value under this name;
# the shim below, started inside the sandbox, applies them and execs the server. So neither
# the host-side helpers (the cgroup shell, bubblewrap, the launcher) nor the shim's own
# interpreter (-I: no PYTHON* variables, -S: no site) ever run with, say, an LD_PRELOAD.
SERVER_ENV_VAR = "M3AGENT_SERVER_ENV"
_SHIM = """\
import json, os, sys
env = json.loads(os.environ.pop("M3AGENT_SERVER_ENV", "{}"))
os.environ.update(env)
try:
    os.execvp(sys.argv[1], sys.argv[1:])
except OSError as e:
    sys.stderr.write(f"m3agent: cannot run {sys.argv[1]}: {e.strerror}\\n")
    sys.exit(127)
"""


def shim_argv(argv: list[str]) -> list[str]:
    return [boot.interpreter(), "-I", "-S", "-B", "-c", _SHIM, *argv]


def stdio_parameters(
    cfg: McpServerConfig, sandbox: Sandbox | None, run_dir: Path, workspace: Path
) -> tuple[StdioServerParameters, Cgroup | None]:
    """StdioServerParameters for the confined command (the SDK spawns and stops it), and the
    server's own pids cgroup where one can be made (the caller removes it when it stops)."""
    from mcp.client.stdio import StdioServerParameters, get_default_environment

    cwd = Path(cfg.cwd).expanduser() if cfg.cwd else workspace
    if not cwd.is_absolute():
        cwd = workspace / cwd
    argv = shim_argv([cfg.command, *cfg.args])
    # The SDK's allow-list (HOME, PATH, USER, ...); the server's own variables are applied by
    # the shim inside the sandbox (those the user wrote pass even when they look like secrets).
    env = get_default_environment()
    env["PATH"] = command_path()  # as the user gave it: the process's own is confined
    full, cgroup = argv, None
    if sandbox is not None:
        sandbox = server_sandbox(sandbox, cfg)
        if not sandbox.report.protective and not sandbox.policy.dangerously_no_sandbox:
            raise SandboxUnavailable(
                "no sandbox layer is available here; refusing to start the server "
                "(pass --dangerously-no-sandbox to run it unprotected)"
            )
        # No per-command process watch: as root it would poll /proc for the server's whole
        # life; a pids cgroup limits processes instead (where none can be made, docs/mcp.md).
        full, env, _ = sandbox.launch_argv(argv, cwd.resolve(), run_dir, env=env, nproc_watch=False)
        if SandboxLayer.CGROUP in sandbox.active_layers():
            try:
                cgroup = Cgroup.create(sandbox.policy.limits.nproc)
            except OSError:  # probed fine but failed now: the launcher's tree kill remains
                cgroup = None
        if cgroup is not None:  # join the group before anything starts, then exec
            procs = cgroup.path / "cgroup.procs"
            full = ["/bin/sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "m3agent-cg", *full]
    env = {k: v for k, v in env.items() if not loader_variable(k)}  # the host's, if any
    env[SERVER_ENV_VAR] = json.dumps(dict(cfg.env))
    return StdioServerParameters(command=full[0], args=full[1:], env=env, cwd=str(cwd)), cgroup


def hidden_paths(cfg: McpServerConfig, sandbox: Sandbox | None, workspace: Path) -> list[Path]:
    """Paths the server's command line names (command, arguments, cwd) that exist here but
    that its sandbox hides: under the home directory, outside the workspace, the writable
    roots and the home allow-list (the config's [sandbox] allow_read joins it). A server kept
    in ~/mcp-servers fails with "can't open file" for this reason; the error says so."""
    from ..sandbox.policy import SandboxMode

    if sandbox is None or cfg.transport is not Transport.STDIO:
        return []
    policy = sandbox.policy
    if policy.mode is SandboxMode.FULL_ACCESS or policy.dangerously_no_sandbox:
        return []
    home = policy.home_dir()
    shown = (workspace.resolve(), *policy.writable_roots(), *policy.home_allowed())
    out: list[Path] = []
    for word in (cfg.command, *cfg.args, cfg.cwd or ""):
        raw = word.rpartition("=")[2] if word.startswith("-") else word  # --script=/x/y
        if not raw.startswith(("/", "~")):
            continue
        p = Path(os.path.realpath(Path(raw).expanduser()))
        inside_home = p == home or home in p.parents
        if not inside_home or not p.exists():
            continue
        if not any(p == r or r in p.parents for r in shown) and p not in out:
            out.append(p)
    return out


def hidden_hint(paths: list[Path]) -> str:
    """What to do about hidden_paths, in one clause."""
    named = ", ".join(str(p) for p in paths)
    return (
        f"{named} is in the home directory, which the sandbox hides from servers outside "
        "the workspace: keep the server in the workspace, or add its directory to allow_read "
        "in the config's [sandbox] table (docs/mcp.md)"
    )


class _WatchedRead:
    """The transport's read stream; calls `on_garbage` for a line that is not JSON-RPC and
    `on_closed` when the stream ends (the process exited, the HTTP stream went away), so a
    server that died between calls is started again before the next one, not blamed on it."""

    def __init__(
        self, inner: Any, on_garbage: Callable[[Exception], None], on_closed: Callable[[], None]
    ) -> None:
        self._inner = inner
        self._on_garbage = on_garbage
        self._on_closed = on_closed

    def __getattr__(self, name: str) -> Any:  # last_context and friends
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        try:
            item = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_closed()
            raise
        if isinstance(item, Exception):
            self._on_garbage(item)
        return item

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _WatchedRead:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@asynccontextmanager
async def open_transport(
    cfg: McpServerConfig,
    *,
    stdio: StdioServerParameters | None,
    errlog: TextIO,
    on_garbage: Callable[[Exception], None],
    on_closed: Callable[[], None],
    oauth_dir: Path | None = None,
) -> AsyncIterator[Any]:
    """(read, write) streams to the server; `stdio` is the StdioServerParameters (a stdio
    server's; None for HTTP and SSE)."""
    if cfg.transport is Transport.STDIO:
        from mcp.client.stdio import stdio_client

        assert stdio is not None  # stdio_parameters made them (connection._hold)

        async with stdio_client(stdio, errlog=errlog) as (read, write):
            yield _WatchedRead(read, on_garbage, on_closed), write
        return
    import httpx2

    headers = dict(cfg.headers)
    auth = None
    configured = any(k.lower() == "authorization" for k in headers)
    if oauth_dir is not None and cfg.transport is Transport.HTTP and not configured:
        from .oauth import session_auth  # configured credentials win; otherwise OAuth if asked

        auth = session_auth(cfg.name, cfg.url, oauth_dir)
    timeout = httpx2.Timeout(30.0, read=max(300.0, cfg.tool_timeout_s or 0.0))
    if cfg.transport is Transport.SSE:
        from mcp.client.sse import sse_client

        async with sse_client(
            cfg.url,
            headers=headers,
            timeout=30.0,
            sse_read_timeout=max(300.0, cfg.tool_timeout_s or 0.0),
        ) as (read, write):
            yield _WatchedRead(read, on_garbage, on_closed), write
        return
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth) as http:  # noqa: SIM117
        async with streamable_http_client(cfg.url, http_client=http) as (read, write):
            yield _WatchedRead(read, on_garbage, on_closed), write


def stderr_tail(path: Path, lines: int = 3) -> str:
    """The server's last stderr lines, for an error message."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4096))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    rows = [r.strip() for r in text.splitlines() if r.strip()]
    return " | ".join(rows[-lines:])
