"""The MCP part of settings: which servers a session starts, from which files, and trust.

Sources, later ones replacing a server of the same name:
1. `[mcp_servers.NAME]` tables in the user config (Codex's format; trusted);
2. `.mcp.json` in the workspace (Claude Code's format; it comes with the repository, so each
   server needs the user's one-time trust, kept in `<home>/mcp-trust.json` with a
   fingerprint of its command/url: a changed entry needs trust again);
3. `--mcp-config FILE` (Claude Code's format; the user named it, so trusted).
`--strict-mcp-config` keeps only 3.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from m3agent.engine.json_file import TextReader, read_json
from m3agent.tools.host_read import default_reader
from m3agent.tools.mcp.config import (
    McpConfig,
    McpServerConfig,
    Scope,
    from_claude,
    from_codex,
    parse_mcp_json,
)
from m3agent.tools.private_fs import write_private

from .. import permission_store

PROJECT_FILE = ".mcp.json"
TRUST_FILE = "mcp-trust.json"


def user_servers(table: Any, source: Path, env: Mapping[str, str]) -> tuple[McpServerConfig, ...]:
    if not isinstance(table, Mapping):
        raise ValueError(f"{source}: [mcp_servers] must hold one table per server")
    return tuple(from_codex(str(n), t, source=str(source), env=env) for n, t in table.items())


def read_mcp_json(path: Path, scope: Scope, env: Mapping[str, str]) -> tuple[McpServerConfig, ...]:
    data = read_json(path, _reader(path, scope))
    try:
        return parse_mcp_json(data, scope=scope, source=str(path), env=env)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e


def _reader(path: Path, scope: Scope) -> TextReader:
    """A project's .mcp.json is the repository's: read under the host read policy (a link
    to a secret is refused); a file the user names (--mcp-config) is read as it is."""
    if scope is Scope.PROJECT:
        return default_reader(path.parent).settings_text
    return lambda p: p.read_text(encoding="utf-8")


# ---- trust ------------------------------------------------------------------------------


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_private(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def is_trusted(home: Path, project: Path, server: McpServerConfig) -> bool:
    entry = (
        permission_store.read_table(home / TRUST_FILE)
        .get("projects", {})
        .get(str(project.resolve()), {})
    )
    saved: object = entry.get(server.name)
    return saved == server.fingerprint()


def trust(home: Path, project: Path, servers: Sequence[McpServerConfig]) -> None:
    path = home / TRUST_FILE
    data = permission_store.read_table(path)
    projects = data.setdefault("projects", {})
    entry = projects.setdefault(str(project.resolve()), {})
    for s in servers:
        entry[s.name] = s.fingerprint()
    _write_json(path, data)


def project_servers(cwd: Path, env: Mapping[str, str]) -> tuple[McpServerConfig, ...]:
    path = cwd / PROJECT_FILE
    return read_mcp_json(path, Scope.PROJECT, env) if path.is_file() else ()


def project_entries(
    cwd: Path, env: Mapping[str, str]
) -> tuple[tuple[McpServerConfig, ...], tuple[str, ...]]:
    """(the usable servers, one line per refused entry): a session starts without a refused
    entry (an LD_PRELOAD, a `${TOKEN}`) instead of failing on the repository's file."""
    path = cwd / PROJECT_FILE
    if not path.is_file():
        return (), ()
    try:
        data = read_json(path, _reader(path, Scope.PROJECT))
    except ValueError as e:
        return (), (f"{e}; its MCP servers were not started",)
    entries = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        return (), (f'{path}: expected {{"mcpServers": {{NAME: {{...}}}}}}; nothing started',)
    servers, errors = [], []
    for name, entry in entries.items():
        try:
            servers.append(
                from_claude(str(name), entry, scope=Scope.PROJECT, source=str(path), env=env)
            )
        except ValueError as e:
            errors.append(f"{path}: {e}; it was not started")
    return tuple(servers), tuple(errors)


# ---- the session's servers ----------------------------------------------------------------


def resolve(
    *,
    home: Path,
    cwd: Path,
    user: Sequence[McpServerConfig],
    files: Sequence[str],
    strict: bool,
    trust_project: bool,
    env: Mapping[str, str] | None = None,
) -> McpConfig:
    env = os.environ if env is None else env
    chosen: dict[str, McpServerConfig] = {}
    skipped: list[str] = []
    if not strict:
        for s in user:
            chosen[s.name] = s
        project, refused = project_entries(cwd, env)
        skipped += refused
        for s in project:
            if trust_project or is_trusted(home, cwd, s):
                chosen[s.name] = s
            else:  # (a user server of the same name stays: a repository cannot switch it off)
                skipped.append(
                    f"MCP server {s.name} from {s.source} is not trusted yet; it was not "
                    "started (trust it with `m3agent mcp trust`, or pass --trust-project-mcp)"
                )
    for f in files:
        for s in read_mcp_json(Path(f).expanduser(), Scope.FLAG, env):
            chosen[s.name] = s
    servers = [s for s in chosen.values() if s.enabled]
    return McpConfig(tuple(servers), tuple(skipped), oauth_dir=home / "mcp-oauth")
