"""write_file: create or overwrite a file atomically (mode bits kept)."""

from __future__ import annotations

import difflib
import stat
from pathlib import Path

from pydantic import BaseModel, Field

from .base import Capability, Preview, PreviewKind, Tool, ToolContext, ToolResult, Touches
from .bounds import bounded_diff, preview_diff
from .fdio import FsRefused, lstat, read_bytes, write_atomic
from .paths import check_write, display, hardlinks_allowed


class WriteFileArgs(BaseModel):
    path: str = Field(description="File path, relative to the workspace or absolute.")
    content: str = Field(description="The complete new content of the file.")


class WriteFile(Tool[WriteFileArgs]):
    name = "write_file"
    claude_names = ("Edit", "Write")
    capability = Capability.WRITE
    kind = "edit"
    description = "Create a file or replace its whole content. Parent directories are created."
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
        try:  # through the checked directory's descriptor (tools/fdio.py)
            write_atomic(path, args.content.encode("utf-8"), shown, make_parents=True)
        except FsRefused as e:
            return ToolResult(str(e), is_error=True)
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
        st = lstat(path)
        old = ""
        if st is not None and stat.S_ISDIR(st.st_mode):
            return ToolResult(f"{shown}: is a directory", is_error=True)
        if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
            return ToolResult(  # reading a FIFO would hang the preview
                f"{shown}: not a regular file (a FIFO, socket or device)", is_error=True
            )
        if st is not None and stat.S_ISREG(st.st_mode):
            try:  # a hard-linked file is refused: its old text would reach the diff
                data = read_bytes(path, shown, links_ok=hardlinks_allowed(path, ctx))
            except FsRefused as e:
                return ToolResult(str(e), is_error=True)
            old = data.decode("utf-8", "replace")
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
