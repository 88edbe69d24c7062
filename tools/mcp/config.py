"""MCP server configuration as plain data, parsed from the shapes users already write.

Two dialects describe the same thing:
- Claude Code's `.mcp.json`: {"mcpServers": {NAME: {"command", "args", "env"}}} for stdio, or
  {"type": "http" | "sse", "url", "headers"} for a remote server; `${VAR}` and
  `${VAR:-default}` are expanded from the environment;
- Codex's `[mcp_servers.NAME]` TOML table: command/args/env/env_vars/cwd for stdio, url with
  http_headers/bearer_token_env_var for streamable HTTP; enabled, startup_timeout_sec,
  tool_timeout_sec, enabled_tools, disabled_tools.
m3agent adds `network = true|false` (default false) for a stdio server's sandbox.

Reading the files is app/settings' job; this module only turns their values into
`McpServerConfig`s, with one-line ValueErrors that name the server and the key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TypedDict

from ..json_types import JSONObject
from .entry_rules import fingerprint, refuse_expansion, refuse_loader_variables


class Transport(StrEnum):
    STDIO = "stdio"
    HTTP = "http"  # streamable HTTP
    SSE = "sse"  # the older HTTP+SSE transport


class Scope(StrEnum):
    USER = "user"  # the user's own config: trusted
    PROJECT = "project"  # a .mcp.json that came with the repository: needs the user's trust
    FLAG = "flag"  # --mcp-config FILE on the command line: the user named it, trusted


# A server name becomes part of tool names (mcp__NAME__TOOL), so no "__" and no odd characters.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    name: str
    transport: Transport
    scope: Scope = Scope.USER
    source: str = ""  # the file it came from (messages, trust)
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # the server's own variables, over the allow-list
    cwd: str | None = None
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    network: bool = False  # a stdio server's sandbox lets it use the network
    enabled: bool = True
    startup_timeout_s: float = 30.0
    tool_timeout_s: float | None = None  # None: the session's tool timeout
    enabled_tools: tuple[str, ...] | None = None  # None: all
    disabled_tools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _NAME.match(self.name) or "__" in self.name:
            raise ValueError(
                f"MCP server name {self.name!r}: use letters, digits, '-' and '_' (no '__'), "
                "since it becomes part of tool names"
            )
        if self.transport is Transport.STDIO and not self.command:
            raise ValueError(f"MCP server {self.name!r}: a stdio server needs a command")
        if self.transport is not Transport.STDIO and not self.url.startswith(
            ("http://", "https://")
        ):
            raise ValueError(f"MCP server {self.name!r}: url must start with http:// or https://")
        for key in ("startup_timeout_s", "tool_timeout_s"):
            if getattr(self, key) is not None and getattr(self, key) <= 0:
                raise ValueError(f"MCP server {self.name!r}: {key} must be positive")

    def fingerprint(self) -> str:
        """What the user trusted: every field that changes what runs or what it can reach
        (tools/mcp/entry_rules.py); a changed one needs trust again."""
        return fingerprint(self)

    def wants_tool(self, tool: str) -> bool:
        if self.enabled_tools is not None and tool not in self.enabled_tools:
            return False
        return tool not in self.disabled_tools

    def describe(self) -> str:
        """One line: how it starts or where it is."""
        if self.transport is Transport.STDIO:
            return " ".join([self.command, *self.args])
        return f"{self.transport.value} {self.url}"

    def to_dict(self, *, redact: bool = True) -> JSONObject:
        def hide(value: str) -> str:
            return "***" if redact and value else value

        d: JSONObject = {
            "name": self.name,
            "transport": self.transport.value,
            "scope": self.scope.value,
            "source": self.source,
            "enabled": self.enabled,
        }
        if self.transport is Transport.STDIO:
            d |= {
                "command": self.command,
                "args": list(self.args),
                "env": {k: hide(v) for k, v in self.env},
                "cwd": self.cwd,
                "network": self.network,
            }
        else:
            d |= {"url": self.url, "headers": {k: hide(v) for k, v in self.headers}}
        d |= {"startup_timeout_s": self.startup_timeout_s, "tool_timeout_s": self.tool_timeout_s}
        return d


@dataclass(frozen=True, slots=True)
class McpConfig:
    """Every server a session may start, in a stable order (their tools keep that order)."""

    servers: tuple[McpServerConfig, ...] = ()
    skipped: tuple[str, ...] = field(default=())  # one line per server left out, and why
    oauth_dir: Path | None = None  # where OAuth tokens of HTTP servers live (None: no OAuth)

    def get(self, name: str) -> McpServerConfig | None:
        return next((s for s in self.servers if s.name == name), None)


def expand(value: str, env: Mapping[str, str]) -> str:
    """Claude Code's `${VAR}` / `${VAR:-default}`; an unset variable without default is an error."""

    def sub(m: re.Match[str]) -> str:
        name: str = m.group(1)
        default: str | None = m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ValueError(f"environment variable {name} is not set")

    return _VAR.sub(sub, value)


class _Fields(TypedDict, total=False):
    """The McpServerConfig fields an entry sets (the rest keep their defaults)."""

    command: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    cwd: str | None
    url: str
    headers: tuple[tuple[str, str], ...]
    network: bool
    enabled: bool
    startup_timeout_s: float
    tool_timeout_s: float | None
    enabled_tools: tuple[str, ...] | None
    disabled_tools: tuple[str, ...]


def _strs(server: str, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"MCP server {server!r}: {key} must be a list of strings")
    return tuple(value)


def _table(server: str, key: str, value: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"MCP server {server!r}: {key} must be a table of strings")
    return tuple((str(k), v) for k, v in value.items())


def _number(server: str, key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"MCP server {server!r}: {key} must be a number of seconds")
    return float(value)


def _checked(name: str, entry: object, keys: set[str], not_a_mapping: str) -> Mapping[str, Any]:
    """A server's entry (either format): a mapping of known keys, else ValueError."""
    if not isinstance(entry, Mapping):
        raise ValueError(f"MCP server {name!r}: {not_a_mapping}")
    unknown = set(entry) - keys
    if unknown:
        raise ValueError(f"MCP server {name!r}: unknown key(s) {', '.join(sorted(unknown))}")
    return entry


def _transport(name: str, kind: str) -> Transport:
    try:
        return Transport("http" if kind == "streamable-http" else kind)
    except ValueError:
        raise ValueError(f"MCP server {name!r}: unknown type {kind!r} (stdio, http, sse)") from None


_CLAUDE_KEYS = {"type", "command", "args", "env", "url", "headers", "cwd", "network", "timeout"}


def from_claude(
    name: str, entry: object, *, scope: Scope, source: str, env: Mapping[str, str]
) -> McpServerConfig:
    """One entry of `.mcp.json`'s mcpServers."""
    entry = _checked(name, entry, _CLAUDE_KEYS, "must be an object")
    if scope is Scope.PROJECT:  # the repository's words: no reading the user's environment
        refuse_expansion(name, dict(entry))
        refuse_loader_variables(name, dict(_table(name, "env", entry.get("env", {}))))
    transport = _transport(name, entry.get("type") or ("stdio" if "command" in entry else "http"))
    try:

        def x(s: str) -> str:
            return expand(s, env)

        values: _Fields = {
            "command": x(entry.get("command") or ""),
            "args": tuple(x(a) for a in _strs(name, "args", entry.get("args", []))),
            "env": tuple((k, x(v)) for k, v in _table(name, "env", entry.get("env", {}))),
            "url": x(entry.get("url") or ""),
            "headers": tuple(
                (k, x(v)) for k, v in _table(name, "headers", entry.get("headers", {}))
            ),
        }
    except ValueError as e:
        if str(e).startswith("MCP server"):
            raise
        raise ValueError(f"MCP server {name!r}: {e}") from None
    if entry.get("cwd") is not None:
        values["cwd"] = str(entry["cwd"])
    if "network" in entry:
        values["network"] = bool(entry["network"])
    if "timeout" in entry:  # m3agent's own key: the tool timeout in seconds
        values["tool_timeout_s"] = _number(name, "timeout", entry["timeout"])
    return McpServerConfig(name, transport, scope, source, **values)


_CODEX_KEYS = {
    "command",
    "args",
    "env",
    "env_vars",
    "cwd",
    "url",
    "http_headers",
    "headers",
    "bearer_token_env_var",
    "enabled",
    "startup_timeout_sec",
    "tool_timeout_sec",
    "enabled_tools",
    "disabled_tools",
    "network",
    "type",
}


def from_codex(
    name: str, table: object, *, source: str, env: Mapping[str, str], scope: Scope = Scope.USER
) -> McpServerConfig:
    """One `[mcp_servers.NAME]` table of a TOML config."""
    table = _checked(name, table, _CODEX_KEYS, f"[mcp_servers.{name}] must be a table")
    if scope is Scope.PROJECT:
        refuse_expansion(name, dict(table))
        if table.get("env_vars") or table.get("bearer_token_env_var"):
            raise ValueError(
                f"MCP server {name!r}: env_vars and bearer_token_env_var read your environment; "
                "a project's config may not use them"
            )
        refuse_loader_variables(name, dict(_table(name, "env", table.get("env", {}))))
    url = table.get("url") or ""
    transport = _transport(name, table.get("type") or ("http" if url else "stdio"))
    server_env = dict(_table(name, "env", table.get("env", {})))
    for var in _strs(name, "env_vars", table.get("env_vars", [])):
        if var in env:  # Codex: names passed through from m3agent's own environment
            server_env.setdefault(var, env[var])
    headers = dict(
        _table(name, "http_headers", table.get("http_headers", table.get("headers", {})))
    )
    token_var = table.get("bearer_token_env_var")
    if token_var:
        if token_var not in env:
            raise ValueError(f"MCP server {name!r}: bearer_token_env_var {token_var} is not set")
        headers["Authorization"] = f"Bearer {env[token_var]}"
    values: _Fields = {
        "command": table.get("command") or "",
        "args": _strs(name, "args", table.get("args", [])),
        "env": tuple(server_env.items()),
        "cwd": table.get("cwd"),
        "url": url,
        "headers": tuple(headers.items()),
        "network": bool(table.get("network", False)),
        "enabled": bool(table.get("enabled", True)),
        "disabled_tools": _strs(name, "disabled_tools", table.get("disabled_tools", [])),
    }
    if "enabled_tools" in table:
        values["enabled_tools"] = _strs(name, "enabled_tools", table["enabled_tools"])
    if "startup_timeout_sec" in table:
        values["startup_timeout_s"] = _number(
            name, "startup_timeout_sec", table["startup_timeout_sec"]
        )
    if "tool_timeout_sec" in table:
        values["tool_timeout_s"] = _number(name, "tool_timeout_sec", table["tool_timeout_sec"])
    return McpServerConfig(name, transport, scope, source, **values)


def parse_mcp_json(
    data: object, *, scope: Scope, source: str, env: Mapping[str, str] | None = None
) -> tuple[McpServerConfig, ...]:
    """A whole `.mcp.json` document (or a --mcp-config file in the same format)."""
    env = os.environ if env is None else env
    if not isinstance(data, Mapping) or not isinstance(data.get("mcpServers", {}), Mapping):
        raise ValueError(f'{source}: expected {{"mcpServers": {{NAME: {{...}}}}}}')
    return tuple(
        from_claude(str(n), e, scope=scope, source=source, env=env)
        for n, e in data.get("mcpServers", {}).items()
    )
