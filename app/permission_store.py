"""`<home>/permissions.json`: the user's saved permissions, read and written only here.

One file holds three keys, each written by a different answer, so every writer must keep
the others' keys as they are (read, change one key, write back, 0600 in a 0700 home):
- "allow": tools an "always allow" answer lets run unasked (a list of names; they become
  allow rules after the config's own, app/settings.py);
- "shell_prefixes": shell command prefixes `s` saved in an approval (lists of words; the
  approval gate answers with them, agent/shell_prefixes.py);
- "rules": path rules `/permissions allow|ask|deny RULE` saved ({RULE: action}).
A project's `.m3agent/permissions.json` and trust are app/prefix_rules.py's (read there,
never written by m3agent).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from m3agent.agent.config import ToolRule
from m3agent.engine.json_file import read_json, read_json_object
from m3agent.tools.private_fs import private_dir, write_private

FILE = "permissions.json"
ALLOW, SHELL_PREFIXES, RULES = "allow", "shell_prefixes", "rules"


def read(home: Path) -> dict[str, Any]:
    """The file's table; {} when it is missing or broken (then nothing saved counts)."""
    try:
        return read_json_object(home / FILE)
    except ValueError:
        return {}


def read_checked(home: Path) -> dict[str, Any]:
    """The file's table; {} when it is missing; a broken file is a ValueError that says how
    to recover (settings are loaded with it: the user must learn why nothing starts)."""
    return read_table(home / FILE)


def read_table(path: Path) -> dict[str, Any]:
    """A JSON table the agent keeps under its data home (this file, the MCP trust file), read
    as read_checked reads this one."""
    if not path.exists():
        return {}
    try:
        data = read_json(path)
    except ValueError as e:
        raise ValueError(f"{e}; remove it to start over") from None
    return data if isinstance(data, dict) else {}


def update(home: Path, change: Callable[[dict[str, Any]], None], *, checked: bool = False) -> None:
    """Reads the table, lets `change` edit it in place, writes it back (0600). `checked`: a
    broken file is a ValueError, never replaced (an "always allow" answer); otherwise a
    broken file is started over."""
    private_dir(home)
    data = read_checked(home) if checked else read(home)
    change(data)
    write_private(home / FILE, json.dumps(data, indent=1, sort_keys=True) + "\n")


# ---- the keys ---------------------------------------------------------------------------------


def prefixes_of(data: dict[str, Any]) -> list[tuple[str, ...]]:
    """The well-formed "shell_prefixes" of a table (this file's or a project's)."""
    raw = data.get(SHELL_PREFIXES, [])
    out = []
    for p in raw if isinstance(raw, list) else []:
        if isinstance(p, list) and p and all(isinstance(w, str) and w for w in p):
            out.append(tuple(p))
    return out


def add_prefix(home: Path, prefix: tuple[str, ...]) -> None:
    def change(data: dict[str, Any]) -> None:
        saved = prefixes_of(data)
        if tuple(prefix) not in saved:
            saved.append(tuple(prefix))
        data[SHELL_PREFIXES] = [list(p) for p in saved]

    update(home, change)


def allowed_tools(home: Path) -> tuple[str, ...]:
    allow = read_checked(home).get(ALLOW, [])
    return tuple(a for a in allow if isinstance(a, str) and a) if isinstance(allow, list) else ()


def add_allowed_tool(home: Path, tool: str) -> None:
    def change(data: dict[str, Any]) -> None:
        raw = data.get(ALLOW, [])
        allow = [a for a in raw if isinstance(a, str)] if isinstance(raw, list) else []
        if tool not in allow:
            allow.append(tool)
        data[ALLOW] = allow

    update(home, change, checked=True)


def rule_entries(home: Path) -> dict[str, Any]:
    """The saved "rules" table as written ({RULE: action}); app/prefix_rules.py checks each."""
    raw = read(home).get(RULES, {})
    return raw if isinstance(raw, dict) else {}


def set_rule(home: Path, rule: str, action: str | None) -> None:
    """Sets RULE's action, or (None) removes it: ValueError when there is no such rule."""

    def change(data: dict[str, Any]) -> None:
        found = data.get(RULES)
        rules: dict[str, Any] = found if isinstance(found, dict) else {}
        if action is None:
            if rule not in rules:
                raise ValueError(f"no saved rule {rule!r}")
            del rules[rule]
        else:
            rules[rule] = action
        data[RULES] = rules

    update(home, change)


def persisted_rules(home: Path) -> tuple[ToolRule, ...]:
    """The "always allow" answers as allow rules (settings add them after the config's own)."""
    return tuple(ToolRule(name, "allow") for name in allowed_tools(home))


def persist_allow(home: Path, tool: str) -> None:
    """Keeps an "always allow" answer for later sessions."""
    add_allowed_tool(home, tool)
