"""write_file: create or overwrite a file atomically (mode bits kept)."""

from __future__ import annotations

import difflib

from m3agent.tools.base import Tool, ToolContext, ToolResult
from m3agent.tools.bounds import bounded_diff
from m3agent.tools.fsutil import atomic_write
from m3agent.tools.paths import check_write, display
from pydantic import BaseModel, Field


class WriteFileArgs(BaseModel):
    path: str = Field(description="File path, relative to the workspace or absolute.")
    content: str = Field(description="The complete new content of the file.")


class WriteFile(Tool):
    name = "write_file"
    description = "Create a file or replace its whole content. Parent directories are created."
    Args = WriteFileArgs
    mutates = True

    def run(self, args: WriteFileArgs, ctx: ToolContext) -> ToolResult:
        path = check_write(args.path, ctx)  # PathDenied: Toolset.dispatch reports it
        shown = display(path, ctx)
        if path.is_dir():
            return ToolResult(f"{shown}: is a directory", is_error=True)
        old = ""
        if path.exists():
            old = path.read_bytes().decode("utf-8", "replace")
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, args.content.encode("utf-8"))
        _, _, diff = bounded_diff(list(difflib.unified_diff(
            old.splitlines(keepends=True), args.content.splitlines(keepends=True),
            f"a/{shown}", f"b/{shown}",
        )))  # the model gets no diff here; the front end's is bounded too
        verb = "updated" if old else "created"
        return ToolResult(
            f"{verb} {shown} ({len(args.content.encode('utf-8'))} bytes)",
            metadata={"diff": diff, "paths_changed": [str(path)]},
        )
