"""Writes for `m3agent mcp add|remove`: a `[mcp_servers.NAME]` table in the user config
(edited as text, so the user's comments and layout elsewhere stay as they were), or an entry
in a project's `.mcp.json` (read under the host read policy, written by tools/out_file.py)."""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from m3agent.engine.json_file import read_json_object
from m3agent.tools.host_read import default_reader
from m3agent.tools.out_file import write_out
from m3agent.tools.private_fs import write_private

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE.match(k) else json.dumps(k)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }"
    raise ValueError(f"cannot write {type(v).__name__} to TOML")


def _load(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML ({e})") from e


def add_user_server(path: Path, name: str, table: dict[str, Any]) -> None:
    if name in _load(path).get("mcp_servers", {}):
        raise ValueError(f"{path} already has an MCP server {name!r} (remove it first)")
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    block = [f"[mcp_servers.{_key(name)}]"]
    block += [f"{_key(k)} = {_value(v)}" for k, v in table.items() if v not in (None, [], {})]
    sep = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
    new = text + sep + "\n".join(block) + "\n"
    tomllib.loads(new)  # never leave a file the next run cannot read
    write_private(path, new)  # 0600 whatever the umask: `-e TOKEN=...` lands here


def _header_names(line: str) -> list[str] | None:
    """The key path of a table header line ([a."b c".d] or [[a.b]]), else None."""
    m = re.match(r"^\s*\[\[?([^\[\]]+)\]\]?\s*(#.*)?$", line)
    if not m:
        return None
    try:
        data = tomllib.loads(f"[{m.group(1)}]\n")
    except tomllib.TOMLDecodeError:
        return None
    out = []
    while isinstance(data, dict) and len(data) == 1:
        k = next(iter(data))
        out.append(k)
        data = data[k]
    return out


def remove_user_server(path: Path, name: str) -> bool:
    """False when the file has no such server."""
    if name not in _load(path).get("mcp_servers", {}):
        return False
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept, skipping = [], False
    for line in lines:
        keys = _header_names(line)
        if keys is not None:
            skipping = keys[:2] == ["mcp_servers", name]
        if not skipping:
            kept.append(line)
    new = "".join(kept)
    if name in tomllib.loads(new).get("mcp_servers", {}):
        raise ValueError(
            f"{path}: the server {name!r} is not written as its own "
            f"[mcp_servers.{name}] table; remove it by hand"
        )
    write_private(path, new)
    return True


def _load_json(path: Path) -> dict[str, Any]:
    """A project's `.mcp.json`, read as the session reads it (tools/host_read.py): the model
    may have made it a link to `~/.docker/config.json`, whose tokens the write below would
    then copy into the workspace."""
    reader = default_reader(path.parent).settings_text
    data = read_json_object(path, missing_ok=not os.path.lexists(path), read=reader)
    data.setdefault("mcpServers", {})
    return data


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """The project file replaced as an entry of the workspace, 0600 (`-e TOKEN=...` lands
    here), never written through a link (tools/out_file.py)."""
    text = json.dumps(data, indent=2) + "\n"
    write_out(path, text, roots=(path.parent,), replace=True)


def add_project_server(path: Path, name: str, entry: dict[str, Any]) -> None:
    data = _load_json(path)
    if name in data["mcpServers"]:
        raise ValueError(f"{path} already has an MCP server {name!r} (remove it first)")
    data["mcpServers"][name] = {k: v for k, v in entry.items() if v not in (None, [], {})}
    _write_json(path, data)


def remove_project_server(path: Path, name: str) -> bool:
    data = _load_json(path)
    if name not in data["mcpServers"]:
        return False
    del data["mcpServers"][name]
    _write_json(path, data)
    return True
