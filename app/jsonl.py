"""JSON lines, one value a line: files the app may not have finished writing (prompt history,
a session log), read leniently; and input text (a request file, stream-json on stdin), parsed
strictly, its first bad line named."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
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


def parse_jsonl(text: str, not_json: Callable[[int, str], str]) -> Iterator[tuple[int, Any]]:
    """(line number from 1, value) for each line of `text` that is not blank. The first that
    is not JSON raises ValueError(not_json(its number, the parser's complaint))."""
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(not_json(n, e.msg)) from None
        yield n, value
