"""Prompt history kept across runs (one JSON string per line), like a shell's."""

from __future__ import annotations

import json
from pathlib import Path

from ..jsonl import read_jsonl

LIMIT = 500


def load_history(path: Path, limit: int = LIMIT) -> list[str]:
    return [item for item in read_jsonl(path, last=limit) if isinstance(item, str)]


def append_history(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(text, ensure_ascii=False) + "\n")
    except OSError:
        pass  # history is a convenience; a read-only home must not stop the prompt
