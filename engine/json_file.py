"""Reading a JSON file with one wording for every way it can fail.

Config files, checkpoints, settings and scripts all answer a bad file with one line that names
it: `PATH does not exist`, `cannot read PATH: REASON`, `PATH is not valid JSON (line N: ...)`,
`PATH must hold a JSON object`. Callers add what the file is for, never a second wording.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

# How a file's text is read: a repository's settings file goes through the host read policy
# (m3agent.tools.host_read), which answers a refused path with a ValueError naming it.
TextReader = Callable[[Path], str]


def _plain(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def read_json(path: Path, read: TextReader = _plain) -> Any:
    """The JSON value in `path`; ValueError (one line naming the file) otherwise."""
    try:
        text = read(path)
    except FileNotFoundError:
        raise ValueError(f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ValueError(f"cannot read {path}: {reason}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON (line {e.lineno}: {e.msg})") from None


def read_json_object(
    path: Path, missing_ok: bool = False, read: TextReader = _plain
) -> dict[str, Any]:
    """The JSON object in `path` (an empty one for a missing file when `missing_ok`)."""
    if missing_ok and not path.exists():
        return {}
    data = read_json(path, read)
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return data


__all__ = ["read_json", "read_json_object"]
