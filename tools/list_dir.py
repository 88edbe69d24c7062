"""list_dir: the entries of one directory (directories end in `/`)."""

from __future__ import annotations

import os

from pydantic import BaseModel, Field

from .base import Tool, ToolContext, ToolResult, Touches
from .bounds import LISTING_CHARS, cut_rows
from .paths import check_read, display

MAX_ENTRIES = 1000


class ListDirArgs(BaseModel):
    path: str = Field(".", description="Directory, relative to the workspace or absolute.")


class ListDir(Tool):
    name = "list_dir"
    description = "List the entries of a directory; subdirectories end with '/'."
    Args = ListDirArgs

    def touches(self, args: ListDirArgs) -> Touches:
        return Touches(reads=(args.path,))

    def run(self, args: ListDirArgs, ctx: ToolContext) -> ToolResult:
        path = check_read(args.path, ctx)  # PathDenied: Toolset.dispatch reports it
        shown = display(path, ctx)
        if not path.exists():
            return ToolResult(f"{shown}: no such directory", is_error=True)
        if not path.is_dir():
            return ToolResult(f"{shown}: not a directory; use read_file", is_error=True)
        try:
            entries = sorted(os.scandir(path), key=lambda e: e.name)
        except PermissionError:
            return ToolResult(f"{shown}: permission denied", is_error=True)
        rows = [e.name + ("/" if e.is_dir() else "") for e in entries[:MAX_ENTRIES]]
        rows, left_out = cut_rows(rows)
        more = len(entries) - len(rows)
        if more:
            why = f"after {LISTING_CHARS:,} characters" if left_out else f"at {MAX_ENTRIES} entries"
            rows.append(f"[truncated {why}: {more} more entries]")
        return ToolResult("\n".join(rows) if rows else "(empty directory)")
