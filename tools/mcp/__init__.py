"""MCP servers as tools: configuration (config.py), connections on a background loop
(connection.py, hub.py, state.py), sandboxed launch (launch.py) and the tool adapter
(adapter.py). docs/mcp.md describes the whole."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base import Tool
from ..extra_toolset import ExtendedToolset
from ..gated_toolset import GatedToolset
from ..toolset import Toolset
from .adapter import McpTool, ReadMcpResource, tool_name
from .config import McpConfig, McpServerConfig, Scope, Transport
from .hub import McpHub
from .oauth import McpLoginRequired
from .state import McpCallError, ServerState, ServerStatus

if TYPE_CHECKING:
    from ..sandbox.runner import Sandbox

__all__ = [
    "McpConfig",
    "McpServerConfig",
    "Scope",
    "Transport",
    "McpHub",
    "McpToolset",
    "McpStartup",
    "ServerState",
    "ServerStatus",
    "McpCallError",
    "McpLoginRequired",
    "start_mcp",
    "mcp_hub",
    "tool_name",
]


class McpToolset(Toolset):
    """The session's tools with its MCP servers' tools after them; `close()` stops the servers."""

    def __init__(self, tools: Iterable[Tool[Any]], hub: McpHub) -> None:
        super().__init__(tools)
        self.hub = hub

    def close(self) -> None:
        super().close()  # the shell's background commands
        self.hub.close()


def mcp_hub(toolset: object) -> McpHub | None:
    """The MCP hub beneath a session's toolset, through the toolsets that wrap another as
    `inner` (the extension tools, an editor's or a subagent's gate); None without MCP."""
    while isinstance(toolset, ExtendedToolset | GatedToolset):
        toolset = toolset.inner
    return toolset.hub if isinstance(toolset, McpToolset) else None


@dataclass(frozen=True, slots=True)
class McpStartup:
    toolset: McpToolset
    errors: dict[str, str]  # one line each: a server that did not start, a tool left out
    needs_login: tuple[str, ...] = ()  # HTTP servers that want `m3agent mcp login NAME`


def start_mcp(
    base: Toolset,
    config: McpConfig,
    *,
    sandbox: Sandbox | None,
    workspace: Path,
    media_dir: Path | None = None,
    client_version: str = "0",
) -> McpStartup:
    """Starts every enabled server, lists its tools once, and fixes the session's tool set."""
    hub = McpHub(
        config,
        sandbox=sandbox,
        workspace=workspace,
        client_version=client_version,
        media_dir=media_dir,
    )
    try:
        errors = {
            name: f"{why}; its tools are not in this session"
            for name, why in hub.start_all().items()
        }
        extra: list[Tool[Any]] = []
        taken = set(base.names())
        for conn in hub.servers():
            for t in conn.tools:
                name = tool_name(conn.cfg.name, t.name)
                if not conn.cfg.wants_tool(t.name):
                    continue
                if name in taken:  # two remote names that read the same once made safe
                    errors[conn.cfg.name + "/" + t.name] = (
                        f"MCP server {conn.cfg.name}: tool {t.name!r} left out: its name "
                        f"{name} is taken"
                    )
                    continue
                taken.add(name)
                extra.append(McpTool(hub, conn.cfg.name, t, conn.cfg.tool_timeout_s))
        if hub.servers():
            extra.append(ReadMcpResource(hub))
        login = tuple(c.cfg.name for c in hub.servers() if c.needs_login)
        return McpStartup(McpToolset([*base.tools(), *extra], hub), errors, login)
    except BaseException:
        hub.close()
        raise
