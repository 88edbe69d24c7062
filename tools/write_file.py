"""write_file: create or overwrite a file atomically (mode bits kept)."""

from __future__ import annotations

import difflib
from pathlib import Path

from pydantic import BaseModel, Field

from .base import Preview, PreviewKind, Tool, ToolContext, ToolResult, Touches
from .bounds import bounded_diff, preview_diff
from .fsutil import atomic_write
from .paths import check_write, display


class WriteFileArgs(BaseModel):
    path: str = Field(description="File path, relative to the workspace or absolute.")
    content: str = Field(description="The complete new content of the file.")


class WriteFile(Tool):
    name = "write_file"
    description = "Create a file or replace its whole content. Parent directories are created."
    Args = WriteFileArgs
    mutates = True

    def touches(self, args: WriteFileArgs) -> Touches:
        return Touches(writes=(args.path,))

    def preview(self, args: WriteFileArgs, ctx: ToolContext) -> Preview:
        plan = self._plan(args, ctx)
        if isinstance(plan, ToolResult):
            return Preview(PreviewKind.TEXT, plan.output, is_error=True)
        text, note = preview_diff(_diff(*plan[1:], args.content))
        return Preview(PreviewKind.DIFF, text, note)

    def run(self, args: WriteFileArgs, ctx: ToolContext) -> ToolResult:
        plan = self._plan(args, ctx)
        if isinstance(plan, ToolResult):
            return plan
        path, shown, old = plan
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, args.content.encode("utf-8"))
        _, _, diff = bounded_diff(_diff(shown, old, args.content))
        # the model gets no diff here; the front end's is bounded too
        verb = "updated" if old else "created"
        return ToolResult(
            f"{verb} {shown} ({len(args.content.encode('utf-8'))} bytes)",
            metadata={"diff": diff, "paths_changed": [str(path)]},
        )

    def _plan(self, args: WriteFileArgs, ctx: ToolContext) -> tuple[Path, str, str] | ToolResult:
        """(path, its shown name, its current text: "" when new), read but not written."""
        path = check_write(args.path, ctx)  # PathDenied: Toolset.dispatch reports it
        shown = display(path, ctx)
        if path.is_dir():
            return ToolResult(f"{shown}: is a directory", is_error=True)
        if path.exists() and not path.is_file():  # reading a FIFO would hang the preview
            return ToolResult(
                f"{shown}: not a regular file (a FIFO, socket or device)", is_error=True
            )
        old = ""
        if path.exists():
            old = path.read_bytes().decode("utf-8", "replace")
        return path, shown, old


def _diff(shown: str, old: str, new: str) -> list[str]:
    return list(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            f"a/{shown}",
            f"b/{shown}",
        )
    )
