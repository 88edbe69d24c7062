"""`@path` references in a prompt: completion candidates and media attachments.

Only images and videos become MediaParts; any other `@file` stays in the text, where the
model can read it with its tools.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from m3agent.engine.api import MediaPart

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp"})
VIDEO_SUFFIXES = frozenset({".mp4", ".mov", ".webm", ".mkv", ".avi"})
_AT_PATH = re.compile(r"(?:(?<=\s)|^)@([^\s@]+)")
_TRAILING = "?!.,;:)]}'\""
_SKIP_DIRS = frozenset({".git", ".venv", "node_modules", "__pycache__"})


def media_kind(path: Path) -> str | None:
    suffix = path.suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        return "image"
    if suffix in VIDEO_SUFFIXES:
        return "video"
    return None


def media_part(raw: str, cwd: Path) -> MediaPart:
    """A MediaPart for a path typed by the user; ValueError (one line) when it cannot be."""
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = cwd / path
    kind = media_kind(path)
    if kind is None:
        raise ValueError(f"{raw}: not an image or video (png, jpg, gif, webp, mp4, mov, webm)")
    if not path.is_file():
        raise ValueError(f"{raw}: no such file")
    return MediaPart(kind, str(path.resolve()))  # type: ignore[arg-type]


def media_in_prompt(text: str, cwd: Path) -> tuple[MediaPart, ...]:
    """The images and videos named as `@path` in the text that exist on disk."""
    parts = []
    for m in _AT_PATH.finditer(text):
        raw = m.group(1)
        # "look at @shot.png?" - the sentence's punctuation is not part of the path.
        for candidate in dict.fromkeys((raw, raw.rstrip(_TRAILING))):
            try:
                parts.append(media_part(candidate, cwd))
                break
            except ValueError:
                continue  # an @mention of a source file, or a typo: left to the model
    return tuple(parts)


def at_token(line: str, column: int) -> str | None:
    """The `@partial` word ending at `column`, without the @, or None."""
    start = line.rfind("@", 0, column)
    if start < 0 or (start > 0 and not line[start - 1].isspace()):
        return None
    token = line[start + 1 : column]
    return None if any(c.isspace() for c in token) else token


def complete_path(partial: str, cwd: Path, limit: int = 50) -> list[str]:
    """Paths under cwd starting with `partial` (directories end in '/'), sorted."""
    directory, _, prefix = partial.rpartition("/")
    base = (cwd / directory) if directory else cwd
    try:
        entries = sorted(os.scandir(base), key=lambda e: e.name)
    except OSError:
        return []
    out = []
    for entry in entries:
        if not entry.name.startswith(prefix) or entry.name in _SKIP_DIRS:
            continue
        if entry.name.startswith(".") and not prefix.startswith("."):
            continue
        rel = f"{directory}/{entry.name}" if directory else entry.name
        out.append(rel + "/" if entry.is_dir() else rel)
        if len(out) >= limit:
            break
    return out


def common_prefix(options: list[str]) -> str:
    return os.path.commonprefix(options) if options else ""
