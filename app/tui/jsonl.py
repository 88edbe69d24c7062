"""Reading a JSON-lines file the TUI did not necessarily finish writing (prompt history, the
session log): a line that does not parse is skipped, an unreadable file reads as empty."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_jsonl(path: Path, last: int | None = None) -> list[Any]:
    """The values of `path`'s lines that parse (a torn last line after a crash does not);
    [] when it cannot be read. `last`: only its last so many lines."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    if last is not None:
        lines = lines[-last:]
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
