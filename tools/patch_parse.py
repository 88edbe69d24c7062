"""Parse a Codex-style `*** Begin Patch` envelope or a unified diff into file operations."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


class PatchError(Exception):
    """The patch text is malformed or does not apply; the message says where."""


@dataclass(slots=True)
class Hunk:
    old: list[str] = field(default_factory=list)  # context + removed lines, in order
    new: list[str] = field(default_factory=list)  # context + added lines, in order
    anchor: str | None = None  # Codex `@@ text`: a line to find first
    hint: int | None = None  # unified diff: 0-based old start line
    at_eof: bool = False
    ops: list[tuple[str, str]] = field(default_factory=list)  # (" " | "-" | "+", text)


@dataclass(slots=True)
class FileOp:
    kind: str  # "add" | "delete" | "update"
    path: str
    move_to: str | None = None
    content: list[str] = field(default_factory=list)  # for add
    hunks: list[Hunk] = field(default_factory=list)


def parse(text: str) -> list[FileOp]:
    stripped = text.strip()
    if stripped.startswith("*** Begin Patch"):
        return _parse_envelope(stripped.splitlines())
    if re.search(r"^--- ", text, re.M) and re.search(r"^\+\+\+ ", text, re.M):
        return _parse_unified(text.splitlines())
    raise PatchError(
        "not a patch: expected '*** Begin Patch' or a unified diff ('--- a/..', '+++ b/..')"
    )


def _parse_envelope(lines: list[str]) -> list[FileOp]:
    if lines[-1].strip() != "*** End Patch":
        raise PatchError("the patch does not end with '*** End Patch'")
    ops: list[FileOp] = []
    i = 1
    while i < len(lines) - 1:
        line = lines[i]
        if line.startswith("*** Add File: "):
            op = FileOp("add", line[14:].strip())
            i += 1
            while i < len(lines) - 1 and not lines[i].startswith("*** "):
                if not lines[i].startswith("+"):
                    raise PatchError(f"line {i + 1}: lines of an added file must start with '+'")
                op.content.append(lines[i][1:])
                i += 1
            ops.append(op)
        elif line.startswith("*** Delete File: "):
            ops.append(FileOp("delete", line[17:].strip()))
            i += 1
        elif line.startswith("*** Update File: "):
            op = FileOp("update", line[17:].strip())
            i += 1
            if i < len(lines) and lines[i].startswith("*** Move to: "):
                op.move_to = lines[i][13:].strip()
                i += 1
            hunk: Hunk | None = None
            while i < len(lines) - 1 and not (
                lines[i].startswith("*** ") and not lines[i].startswith("*** End of File")
            ):
                ln = lines[i]
                if ln.startswith("@@"):
                    hunk = Hunk(anchor=ln[2:].strip() or None)
                    op.hunks.append(hunk)
                elif ln.startswith("*** End of File"):
                    if hunk is not None:
                        hunk.at_eof = True
                else:
                    if hunk is None:
                        hunk = Hunk()
                        op.hunks.append(hunk)
                    _hunk_line(hunk, ln, i)
                i += 1
            if not op.hunks and not op.move_to:
                raise PatchError(f"Update File {op.path}: no hunks")
            ops.append(op)
        elif not line.strip():
            i += 1
        else:
            raise PatchError(f"line {i + 1}: unexpected {line[:60]!r}")
    if not ops:
        raise PatchError("the patch contains no file operations")
    return ops


def _hunk_line(hunk: Hunk, ln: str, i: int) -> None:
    if ln.startswith("+"):
        hunk.new.append(ln[1:])
        hunk.ops.append(("+", ln[1:]))
    elif ln.startswith("-"):
        hunk.old.append(ln[1:])
        hunk.ops.append(("-", ln[1:]))
    elif ln.startswith(" ") or ln == "":
        hunk.old.append(ln[1:])
        hunk.new.append(ln[1:])
        hunk.ops.append((" ", ln[1:]))
    elif ln.startswith("\\"):
        pass  # "\ No newline at end of file"
    else:
        raise PatchError(f"line {i + 1}: hunk lines start with ' ', '+' or '-', got {ln[:40]!r}")


_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _strip_prefix(p: str) -> str:
    p = p.split("\t")[0].strip()
    if p.startswith(("a/", "b/")):
        p = p[2:]
    return p


def _parse_unified(lines: list[str]) -> list[FileOp]:
    ops: list[FileOp] = []
    i = 0
    while i < len(lines):
        if not (
            lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")
        ):
            i += 1
            continue
        old_p, new_p = lines[i][4:], lines[i + 1][4:]
        i += 2
        if old_p.strip() == "/dev/null":
            op = FileOp("add", _strip_prefix(new_p))
        elif new_p.strip() == "/dev/null":
            op = FileOp("delete", _strip_prefix(old_p))
        else:
            op = FileOp("update", _strip_prefix(old_p))
            if _strip_prefix(new_p) != op.path:
                op.move_to = _strip_prefix(new_p)
        while i < len(lines) and lines[i].startswith("@@"):
            m = _HUNK_RE.match(lines[i])
            if not m:
                raise PatchError(f"line {i + 1}: malformed hunk header {lines[i][:60]!r}")
            n_old = int(m.group(2) or 1)
            n_new = int(m.group(4) or 1)
            hunk = Hunk(hint=max(int(m.group(1)) - 1, 0))
            i += 1
            while i < len(lines) and (len(hunk.old) < n_old or len(hunk.new) < n_new):
                _hunk_line(hunk, lines[i], i)
                i += 1
            if i < len(lines) and lines[i].startswith("\\"):
                i += 1
            if len(hunk.old) != n_old or len(hunk.new) != n_new:
                raise PatchError(
                    f"hunk at line {m.group(1)} of {op.path}: line counts do not match its header"
                )
            if op.kind == "add":
                op.content += hunk.new
            elif op.kind == "update":
                op.hunks.append(hunk)
        ops.append(op)
    if not ops:
        raise PatchError("the unified diff contains no files")
    return ops
