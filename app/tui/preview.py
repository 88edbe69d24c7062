"""A diff preview for the approval modal when the event carries none.

Read-only and best effort: it shows what an edit_file / write_file call would change, so the
user approves a diff rather than raw arguments. The tool itself still decides what happens.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

_MAX_BYTES = 2_000_000


def preview_diff(name: str, arguments: dict[str, Any], cwd: Path) -> str | None:
    path_arg = arguments.get("path")
    if not isinstance(path_arg, str) or not path_arg:
        return None
    path = Path(path_arg) if Path(path_arg).is_absolute() else cwd / path_arg
    before = _read(path)
    if name == "edit_file":
        old, new = arguments.get("old_string"), arguments.get("new_string")
        if before is None or not isinstance(old, str) or not isinstance(new, str) or not old:
            return None
        if old not in before:
            return None
        after = before.replace(old, new) if arguments.get("replace_all") else before.replace(old, new, 1)
    elif name == "write_file":
        content = arguments.get("content")
        if not isinstance(content, str):
            return None
        before, after = before or "", content
    else:
        return None
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True),
        fromfile=f"a/{path_arg}", tofile=f"b/{path_arg}",
    )
    return "".join(lines) or None


def _read(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > _MAX_BYTES:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
