"""Prompt history kept across runs (one JSON string per line), like a shell's."""

from __future__ import annotations

import json
from pathlib import Path

from m3agent.tools.private_fs import append_private

from ..jsonl import read_jsonl

LIMIT = 500


def load_history(path: Path, limit: int = LIMIT) -> list[str]:
    return [item for item in read_jsonl(path, last=limit) if isinstance(item, str)]


def append_history(path: Path, text: str) -> None:
    try:
        with append_private(path) as f:  # 0600: the prompts are the user's
            f.write(json.dumps(text, ensure_ascii=False) + "\n")
    except OSError:
        pass  # history is a convenience; a read-only home must not stop the prompt
