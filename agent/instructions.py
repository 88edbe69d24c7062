"""Instruction files beyond the repository snapshot's own (agent/context.py takes AGENTS.md or
CLAUDE.md at the workspace root): the user's `~/.m3agent/AGENTS.md`, then those of the
workspace's parent directories from the top down (a monorepo's root above a package), and
the files their `@path` lines import, as Claude Code reads CLAUDE.md. Read once when a
session starts and sent as one system message after the snapshot, so it is part of the
stable prefix and never rewritten; a resumed session has it in its log."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

NAMES = ("AGENTS.md", "CLAUDE.md")  # per directory: AGENTS.md, else CLAUDE.md
MAX_FILE_BYTES = 64_000
MAX_IMPORT_DEPTH = 5  # as Claude Code: imports of imports, five levels at most
# `@path` at the start of a line or after a space; not an e-mail address, not inside code.
_IMPORT = re.compile(r"(?:^|(?<=\s))@((?:~/|\.{1,2}/|/)?[\w./-]+\.\w+)")


@dataclass(frozen=True, slots=True)
class InstructionFile:
    path: Path
    scope: str  # "user" | "parent" | "import"
    text: str


def _read(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _pick(directory: Path) -> Path | None:
    for name in NAMES:
        if (directory / name).is_file():
            return directory / name
    return None


def _imports(
    file: Path, text: str, seen: set[Path], depth: int, home: Path
) -> list[InstructionFile]:
    if depth > MAX_IMPORT_DEPTH:
        return []
    out: list[InstructionFile] = []
    in_code = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        for raw in _IMPORT.findall(line.split("`")[0]):  # not inside an inline code span
            target = (home / raw[2:]) if raw.startswith("~/") else (file.parent / raw)
            target = target.resolve()
            if target in seen:
                continue
            body = _read(target)
            if body is None:
                continue
            seen.add(target)
            out.append(InstructionFile(target, "import", body))
            out += _imports(target, body, seen, depth + 1, home)
    return out


def find_instructions(
    cwd: Path, user_file: Path | None, home: Path | None = None
) -> list[InstructionFile]:
    """In prompt order: the user's file, the parents' files (outermost first), each followed
    by what it imports; then the imports of the workspace's own file (its text is the
    snapshot's). Missing or unreadable files are skipped."""
    cwd = cwd.resolve()
    home = home or Path("~").expanduser()
    seen: set[Path] = set()
    own = _pick(cwd)
    if own is not None:
        seen.add(own.resolve())
    found: list[InstructionFile] = []

    def take(path: Path | None, scope: str) -> None:
        if path is None or path.resolve() in seen:
            return
        text = _read(path)
        if text is None:
            return
        seen.add(path.resolve())
        found.append(InstructionFile(path.resolve(), scope, text))
        found.extend(_imports(path, text, seen, 1, home))

    take(user_file, "user")
    for parent in reversed(cwd.parents):
        take(_pick(parent), "parent")
    if own is not None and (text := _read(own)) is not None:
        found.extend(_imports(own, text, seen, 1, home))
    return found


def instructions_message_text(files: list[InstructionFile]) -> str:
    parts = [
        f'<instructions source="{f.path}" scope="{f.scope}">\n{f.text.rstrip()}\n</instructions>'
        for f in files
    ]
    return "\n".join(parts)
