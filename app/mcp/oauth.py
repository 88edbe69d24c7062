"""`m3agent mcp login|logout NAME`: OAuth for HTTP MCP servers (tools/mcp/oauth*.py).

login prints the authorization URL on stderr (and opens it in a browser unless
--no-browser or there is no display), waits for the redirect on 127.0.0.1, stores the tokens
in `<home>/mcp-oauth/NAME.json` (0600) and lists the server's tools with them. Failures are one
line and exit code 6 (MCP_LOGIN), the code a headless run also exits with when a server needs
a login.
"""

from __future__ import annotations

import asyncio
import os
import sys
import webbrowser
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..exit_codes import MCP_LOGIN
from ..safe_text import visible

if TYPE_CHECKING:
    from m3agent.tools.mcp.config import McpServerConfig

    from ..settings import Settings


def oauth_dir(home: Path) -> Path:
    return Path(home) / "mcp-oauth"


def find_server(settings: Settings, cwd: Path, name: str) -> McpServerConfig:
    """The server NAME as a session in `cwd` would start it (trust applied), or ValueError."""
    config = settings.mcp_config(cwd)
    server = config.get(name)
    if server is None:
        skipped = next((line for line in config.skipped if f" {name} " in line), None)
        raise ValueError(skipped or f"no MCP server named {name!r}")
    if server.transport.value == "stdio":
        raise ValueError(f"MCP server {name} is a stdio server: OAuth is for HTTP servers")
    return server


def _show(url: str, browser: bool) -> None:
    sys.stderr.write(f"Open this URL to log in (waiting for the redirect):\n  {url}\n")
    sys.stderr.flush()
    if browser and (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        try:
            webbrowser.open(url)
        except Exception:  # noqa: BLE001 - the printed URL is enough
            pass


def run_login(settings: Settings, cwd: Path, name: str, *, browser: bool, timeout_s: float) -> int:
    from m3agent.tools.mcp.oauth import OAuthRefused
    from m3agent.tools.mcp.oauth_login import login

    try:
        server = find_server(settings, cwd, name)
    except ValueError as e:
        sys.stderr.write(f"error: {visible(str(e))}\n")
        return MCP_LOGIN
    try:
        result = asyncio.run(
            login(server, oauth_dir(settings.home), lambda u: _show(u, browser), timeout_s)
        )
    except OAuthRefused as e:
        sys.stderr.write(f"error: {visible(str(e))}\n")
        return MCP_LOGIN
    sys.stdout.write(
        f"logged in to MCP server {name}: {result.tools} tools; token in {result.token_file}\n"
    )
    return 0


def run_logout(settings: Settings, name: str) -> int:
    from m3agent.tools.mcp.oauth import token_path

    path = token_path(oauth_dir(settings.home), name)
    try:
        os.unlink(path)
    except FileNotFoundError:
        sys.stderr.write(f"error: no stored login for MCP server {name}\n")
        return MCP_LOGIN
    sys.stdout.write(f"removed the stored login of MCP server {name} ({path})\n")
    return 0


def login_status(home: Path, server: McpServerConfig) -> dict[str, Any] | None:
    """For `mcp list/get`: the stored login of an HTTP server (no secrets), None for stdio."""
    from m3agent.tools.mcp.oauth import OAuthRefused, TokenFile, token_path

    if server.transport.value == "stdio":
        return None
    try:
        return TokenFile(token_path(oauth_dir(home), server.name), server.url).summary()
    except OAuthRefused as e:
        return {"logged_in": False, "error": str(e)}
