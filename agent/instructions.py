"""Instruction files beyond the repository snapshot's own (agent/context.py takes AGENTS.md or
CLAUDE.md at the workspace root): the user's `~/.m3agent/AGENTS.md`, then those of the
workspace's parent directories from the top down (a monorepo's root above a package), and
the files their `@path` lines import, as Claude Code reads CLAUDE.md. Read once when a
session starts and sent as one system message after the snapshot, so it is part of the
stable prefix and never rewritten; a resumed session has it in its log.

Every file, imports included, is read through the host read policy (tools/host_read.py): an
import of `~/.ssh/id_rsa`, of `/proc/self/environ` or through a symlink to either is not read,
nor, when the repository chose the name, anything in the home directory outside the sandbox's
view; neither is a parent directory's file owned by another user. A parent directory inside
the workspace's git repository (a session in a subdirectory of a clone, or in its
`--worktree`) holds the repository's file, not the user's: it and its imports are read as the
repository chose them, within the repository and the sandbox's view. With `--no-context` none
of these files is read (app/session_context.py)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from m3agent.tools.host_read import HostReader, ReadRefused, default_reader

NAMES = ("AGENTS.md", "CLAUDE.md")  # per directory: AGENTS.md, else CLAUDE.md
MAX_FILE_BYTES = 64_000
MAX_IMPORT_DEPTH = 5  # as Claude Code: imports of imports, five levels at most
# `@path` at the start of a line or after a space; not an e-mail address, not inside code.
_IMPORT = re.compile(r"(?:^|(?<=\s))@((?:~/|\.{1,2}/|/)?[\w./-]+\.\w+)")


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _repository_chose(target: Path, reader: HostReader) -> bool:
    """Whether the entry `target` lies in the workspace (named there, or in a directory that
    resolves there): the repository decides what it is, whoever imports it."""
    workspace = reader.policy.workspace
    if _within(Path(os.path.normpath(target)), workspace):
        return True
    return _within(Path(os.path.realpath(target.parent)), workspace)


def repository_root(cwd: Path) -> Path | None:
    """The root of the git repository holding `cwd`: the nearest directory with a `.git`
    directory at or above it, passing linked worktrees' and submodules' `.git` files on the
    way (their repository goes on above them); None outside any."""
    for d in (cwd, *cwd.parents):
        if (d / ".git").is_dir() and not (d / ".git").is_symlink():
            return d
    return None


def _repository_reader(reader: HostReader, root: Path | None) -> HostReader:
    """`reader` confined to the sandbox's view and the whole repository at `root` (its own
    files), for the repository's files above the workspace; their owner is still checked."""
    return replace(reader, also_shown=(root,) if root else ()).confined_to_view()


@dataclass(frozen=True, slots=True)
class InstructionFile:
    path: Path
    scope: str  # "user" | "parent" | "import"
    text: str


def _read(path: Path, reader: HostReader) -> tuple[Path, str] | None:
    """(canonical path, text) of `path`, or None: missing, too large or refused."""
    try:
        if not path.is_file():
            return None
        real, data = reader.read(path, MAX_FILE_BYTES)
        return real, data.decode("utf-8", errors="replace")
    except (OSError, ReadRefused):
        return None


def _pick(directory: Path) -> Path | None:
    for name in NAMES:
        if (directory / name).is_file():
            return directory / name
    return None


def _imports(
    file: Path, text: str, seen: set[Path], depth: int, reader: HostReader
) -> list[InstructionFile]:
    if depth > MAX_IMPORT_DEPTH:
        return []
    home = reader.policy.home_dir()
    out: list[InstructionFile] = []
    in_code = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        for raw in _IMPORT.findall(line.split("`")[0]):  # not inside an inline code span
            target = (home / raw[2:]) if raw.startswith("~/") else (file.parent / raw)
            by = reader.confined_to_view() if _repository_chose(target, reader) else reader
            got = _read(target, by)
            if got is None or got[0] in seen:
                continue
            real, body = got
            seen.add(real)
            out.append(InstructionFile(real, "import", body))
            out += _imports(target, body, seen, depth + 1, by)
    return out


def find_instructions(
    cwd: Path, user_file: Path | None, reader: HostReader | None = None
) -> list[InstructionFile]:
    """In prompt order: the user's file, the parents' files (outermost first), each followed
    by what it imports; then the imports of the workspace's own file (its text is the
    snapshot's). Missing, unreadable and refused files are skipped. `reader`: the host read
    policy (the default policy for `cwd` when None); `~/` in an import is its home."""
    cwd = cwd.resolve()
    reader = reader or default_reader(cwd)
    seen: set[Path] = set()
    own = _pick(cwd)
    found: list[InstructionFile] = []

    def take(path: Path | None, scope: str, by: HostReader) -> None:
        # The user's own files (theirs, outside the workspace: owner checked) and what they
        # import may reach into the home directory; the repository's may not (HostReader).
        got = None if path is None else _read(path, by)
        if path is None or got is None or got[0] in seen:
            return
        real, text = got
        seen.add(real)
        found.append(InstructionFile(real, scope, text))
        found.extend(_imports(path, text, seen, 1, by))

    repo = reader.confined_to_view()
    own_got = None if own is None else _read(own, repo)
    if own_got is not None:
        seen.add(own_got[0])
    users = reader.unconfined()
    take(user_file, "user", users)
    root = repository_root(cwd)
    # A parent inside the workspace's repository (a session in a subdirectory, or in a
    # --worktree under .m3agent/worktrees) is the repository's file, not the user's: it and
    # what it imports stay in the repository and the sandbox's view (a committed symlink or
    # an import cannot lead into the rest of the home).
    in_repository = _repository_reader(reader, root)
    for parent in reversed(cwd.parents):
        inside = root is not None and _within(parent, root)
        take(_pick(parent), "parent", in_repository if inside else users)
    if own is not None and own_got is not None:
        found.extend(_imports(own, own_got[1], seen, 1, repo))
    return found


def instructions_message_text(files: list[InstructionFile]) -> str:
    parts = [
        f'<instructions source="{f.path}" scope="{f.scope}">\n{f.text.rstrip()}\n</instructions>'
        for f in files
    ]
    return "\n".join(parts)
