"""list_dir: the entries of one directory (directories end in `/`)."""

from __future__ import annotations

import os

from pydantic import BaseModel, Field

from .base import Capability, Tool, ToolContext, ToolResult, Touches
from .bounds import LISTING_CHARS, cut_rows
from .fdio import FsRefused, open_dir
from .paths import check_read, display, shown_name

MAX_ENTRIES = 1000


class ListDirArgs(BaseModel):
    path: str = Field(".", description="Directory, relative to the workspace or absolute.")


class ListDir(Tool[ListDirArgs]):
    name = "list_dir"
    claude_names = ("LS",)
    capability = Capability.READ
    kind = "search"
    description = "List the entries of a directory; subdirectories end with '/'."

    def touches(self, args: ListDirArgs) -> Touches:
        return Touches(reads=(args.path,))

    def run(self, args: ListDirArgs, ctx: ToolContext) -> ToolResult:
        path = check_read(args.path, ctx)  # PathDenied: Toolset.dispatch reports it
        shown = display(path, ctx)
        try:  # by descriptor: a directory swapped for a symlink meanwhile is not listed
            fd = open_dir(path, shown)
        except FsRefused as e:
            msg = str(e)
            if "no such" in msg:
                msg = f"{shown}: no such directory"
            elif "not a directory" in msg:
                msg = f"{shown}: not a directory; use read_file"
            return ToolResult(msg, is_error=True)
        try:
            with os.scandir(fd) as it:
                entries = sorted(
                    (e for e in it if not (ctx.hidden and ctx.hidden(str(path / e.name)))),
                    key=lambda e: e.name,
                )
            rows = [shown_name(e.name) + ("/" if e.is_dir() else "") for e in entries[:MAX_ENTRIES]]
        except PermissionError:
            return ToolResult(f"{shown}: permission denied", is_error=True)
        finally:
            os.close(fd)
        rows, left_out = cut_rows(rows)
        more = len(entries) - len(rows)
        if more:
            why = f"after {LISTING_CHARS:,} characters" if left_out else f"at {MAX_ENTRIES} entries"
            rows.append(f"[truncated {why}: {more} more entries]")
        return ToolResult("\n".join(rows) if rows else "(empty directory)")
