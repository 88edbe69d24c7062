"""The config file (config.toml): its settings read into Settings' field names, with every
table parsed by its owner, and top-level keys written back (first-run setup) without losing
the file's tables. app/settings.py says which keys exist and where the file is."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Mapping, Set
from pathlib import Path
from typing import Any, TypeVar

from m3agent.agent.config import ToolRule
from m3agent.tools.private_fs import write_private
from m3agent.tools.sandbox.rules import SandboxRules

T = TypeVar("T")


def read_config(path: Path, known: Set[str]) -> dict[str, Any]:
    """The config file's settings by field name (KNOWN: the top-level keys it may set; its
    [sandbox], [web_fetch], [diagnostics] and [tools] tables parsed into their objects);
    ValueError with one line naming the file for any mistake."""
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML ({e})") from e
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from e
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key == "sandbox" and isinstance(value, dict):  # [sandbox] table
            try:
                out["sandbox_rules"] = SandboxRules.from_table(value)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{path}: {e}") from None
            if "mode" in value:
                out["sandbox"] = value["mode"]
        elif key == "web_fetch":
            from m3agent.tools.web_fetch import FetchPolicy  # the fetch tool: ~40 ms, rarely set

            out["web_fetch"] = _table(path, key, value, FetchPolicy.from_table)
        elif key == "diagnostics":
            from m3agent.tools.diagnostics import DiagnosticsConfig  # ~50 ms, rarely set

            out["diagnostics"] = _table(path, key, value, DiagnosticsConfig.from_table)
        elif key == "tools":
            if not isinstance(value, dict):
                raise ValueError(f'{path}: [tools] must be a table of tool = "allow|ask|deny"')
            out["rules"] = tuple(ToolRule(str(k), str(v)) for k, v in value.items())
        elif key == "status_line":  # the TUI's status line command: app/status_line.py
            continue
        elif key in known:
            out[key] = value
        else:
            raise ValueError(f"{path}: unknown setting {key!r}")
    return out


def _table(path: Path, key: str, value: object, parse: Callable[[dict[str, Any]], T]) -> T:
    """A `[key]` table of the config through its parser; any mistake names the file."""
    if not isinstance(value, dict):
        raise ValueError(f"{path}: [{key}] must be a table")
    try:
        return parse(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None


def write_keys(path: Path, values: Mapping[str, str | int], known: Set[str]) -> None:
    """Writes top-level keys into the config file (first-run setup). The keys go before the
    file's own text (before any [table], where TOML wants them); the file is private (0600)."""
    lines = []
    for key, value in values.items():
        if key not in known:
            raise ValueError(f"unknown setting {key!r}")
        # a JSON string is a TOML string, a JSON integer a TOML integer
        shown = json.dumps(value if isinstance(value, int) else str(value))
        lines.append(f"{key} = {shown}\n")
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    old = _without_top_level(old, set(values))
    text = "# written by m3agent's first-run setup\n" + "".join(lines) + old
    tomllib.loads(text)  # never leave a file that the next start cannot read
    write_private(path, text)


def _without_top_level(text: str, keys: set[str]) -> str:
    """The text without its top-level `key = ...` lines for these keys (they are rewritten)."""
    out, top = [], True
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("["):
            top = False
        if top and stripped.split("=", 1)[0].strip() in keys and "=" in stripped:
            continue
        out.append(line)
    return "".join(out)
