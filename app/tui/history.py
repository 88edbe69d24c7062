"""Prompt history kept across runs (one JSON string per line), like a shell's."""

from __future__ import annotations

import json
from pathlib import Path

LIMIT = 500


def load_history(path: Path, limit: int = LIMIT) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()[-limit:]
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line after a crash: skip it
        if isinstance(item, str):
            out.append(item)
    return out


def append_history(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(text, ensure_ascii=False) + "\n")
    except OSError:
        pass  # history is a convenience; a read-only home must not stop the prompt
