"""edit_file: replace one exact, unique occurrence of a string; returns a unified diff
(bounded: tools/bounds.py; the cut is stated)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from .base import Capability, Preview, PreviewKind, Tool, ToolContext, ToolResult, Touches
from .bounds import bounded_diff, preview_diff
from .fdio import FsRefused, read_bytes, write_atomic
from .fsutil import looks_binary
from .paths import check_write, display, hardlinks_allowed


class EditFileArgs(BaseModel):
    path: str = Field(description="File to edit.")
    old_string: str = Field(description="Exact text to replace; must occur exactly once.")
    new_string: str = Field(description="Replacement text.")
    replace_all: bool = Field(False, description="Replace every occurrence instead of exactly one.")


class EditFile(Tool[EditFileArgs]):
    name = "edit_file"
    claude_names = ("Edit", "MultiEdit")
    capability = Capability.WRITE
    kind = "edit"
    description = (
        "Replace an exact string in a file. old_string must match exactly once (include "
        "surrounding lines to make it unique) unless replace_all is true. Returns a diff."
    )
    mutates = True

    def touches(self, args: EditFileArgs) -> Touches:
        return Touches(reads=(args.path,), writes=(args.path,))

    def preview(self, args: EditFileArgs, ctx: ToolContext) -> Preview:
        plan = self._plan(args, ctx)
        if isinstance(plan, ToolResult):
            return Preview(PreviewKind.TEXT, plan.output, is_error=True)
        text, note = preview_diff(_diff(plan))
        return Preview(PreviewKind.DIFF, text, note)

    def run(self, args: EditFileArgs, ctx: ToolContext) -> ToolResult:
        plan = self._plan(args, ctx)
        if isinstance(plan, ToolResult):
            return plan
        try:  # through the checked directory's descriptor (tools/fdio.py)
            write_atomic(plan.path, plan.new.encode("utf-8"), plan.shown)
        except FsRefused as e:
            return ToolResult(str(e), is_error=True)
        diff, note, full = bounded_diff(_diff(plan))
        head = f"edited {plan.shown} ({plan.count} replacement(s))"
        return ToolResult(
            "\n".join(x for x in (head, diff.rstrip("\n"), note) if x),
            metadata={"diff": full, "paths_changed": [str(plan.path)], "truncated": bool(note)},
        )

    def _plan(self, args: EditFileArgs, ctx: ToolContext) -> _Edit | ToolResult:
        """The edit `args` ask for, read but not written; or the error result saying why not
        (one check for run and preview, so a preview fails exactly when the call would)."""
        path = check_write(args.path, ctx)  # PathDenied: Toolset.dispatch reports it
        shown = display(path, ctx)
        try:  # by descriptor, no symlink followed, no hard-linked file read
            data = read_bytes(path, shown, links_ok=hardlinks_allowed(path, ctx))
        except FsRefused as e:
            msg = str(e)
            if msg.endswith("no such file or directory"):
                msg = f"{shown}: no such file; use write_file to create it"
            return ToolResult(msg, is_error=True)
        if looks_binary(data[:8192]):
            return ToolResult(f"{shown}: binary file; edit_file only edits text", is_error=True)
        try:
            old = data.decode("utf-8")
        except UnicodeDecodeError as e:
            return ToolResult(
                f"{shown}: not valid UTF-8 (byte {e.start}); not edited, to avoid corrupting it",
                is_error=True,
            )
        if not args.old_string:
            return ToolResult("old_string is empty; give the exact text to replace", is_error=True)
        if args.old_string == args.new_string:
            return ToolResult(
                "old_string and new_string are identical; nothing to do", is_error=True
            )
        count = old.count(args.old_string)
        if count == 0:
            return ToolResult(
                f"{shown}: old_string not found; read the file and copy the text exactly "
                "(whitespace and indentation included)",
                is_error=True,
            )
        if count > 1 and not args.replace_all:
            return ToolResult(
                f"{shown}: old_string occurs {count} times; add surrounding lines to make it "
                "unique, or set replace_all",
                is_error=True,
            )
        new = old.replace(args.old_string, args.new_string, -1 if args.replace_all else 1)
        return _Edit(path, shown, old, new, count if args.replace_all else 1)


@dataclass(frozen=True, slots=True)
class _Edit:
    path: Path
    shown: str
    old: str
    new: str
    count: int


def _diff(e: _Edit) -> list[str]:
    return list(
        difflib.unified_diff(
            e.old.splitlines(keepends=True),
            e.new.splitlines(keepends=True),
            f"a/{e.shown}",
            f"b/{e.shown}",
        )
    )
