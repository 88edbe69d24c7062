"""glob: files matching a pattern, ignore files respected, results capped."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from .base import Capability, Tool, ToolContext, ToolResult, Touches
from .bounds import LISTING_CHARS, cut_rows
from .fdio import lstat
from .globs import glob_to_regex
from .ignore import walk
from .paths import check_read, display, is_secret

MAX_RESULTS = 500


class GlobArgs(BaseModel):
    pattern: str = Field(description="Glob such as '**/*.py' or 'src/*.ts' (relative to path).")
    path: str = Field(".", description="Directory to search in.")
    include_ignored: bool = Field(False, description="Also match files excluded by .gitignore.")


class Glob(Tool[GlobArgs]):
    name = "glob"
    claude_names = ("Glob",)
    capability = Capability.READ
    kind = "search"
    description = "Find files by glob pattern (** matches any depth). Respects .gitignore."

    def touches(self, args: GlobArgs) -> Touches:
        return Touches(reads=(args.path,))

    def run(self, args: GlobArgs, ctx: ToolContext) -> ToolResult:
        root = check_read(args.path, ctx)  # PathDenied: Toolset.dispatch reports it
        if not root.is_dir():
            return ToolResult(f"{display(root, ctx)}: no such directory", is_error=True)
        regex = re.compile("^" + glob_to_regex(args.pattern.lstrip("./") or "*") + "$")
        hits: list[str] = []
        truncated = False
        for rel, is_dir in walk(root, respect_ignore=not args.include_ignored):
            if ctx.cancel.is_set():
                break
            # lstat by descriptor: a name the walk read through a directory swapped for a
            # symlink meanwhile is not in the workspace now, and is not shown
            if (
                not is_dir
                and regex.match(rel)
                and not is_secret(root / rel, ctx)
                and lstat(root / rel) is not None
            ):
                if len(hits) >= MAX_RESULTS:
                    truncated = True
                    break
                hits.append(display(root / rel, ctx))
        hits, left_out = cut_rows(hits)
        out = "\n".join(hits) if hits else "(no matches)"
        if left_out:
            more = f"{left_out}{'+' if truncated else ''}"  # the walk stopped early too
            truncated = True
            out += (
                f"\n[truncated: {more} more paths left out after {LISTING_CHARS:,} "
                "characters; narrow the pattern]"
            )
        elif truncated:
            out += f"\n[truncated at {MAX_RESULTS} results; narrow the pattern]"
        return ToolResult(out, metadata={"truncated": truncated})
