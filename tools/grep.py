"""grep: regex search over files; ripgrep when installed, a Python walk otherwise."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from pydantic import BaseModel, Field

from .base import Tool, ToolContext, ToolResult, Touches
from .bounds import LISTING_CHARS, cut_rows
from .fsutil import looks_binary
from .ignore import _glob_to_regex, walk
from .paths import check_read, display, is_secret

MAX_MATCHES = 200
MAX_LINE = 400
MAX_FILE_BYTES = 5_000_000  # the Python fallback skips larger files, as rg's defaults would not


class GrepArgs(BaseModel):
    pattern: str = Field(description="Regular expression (Rust/Python syntax).")
    path: str = Field(".", description="File or directory to search.")
    glob: str | None = Field(None, description="Only search files matching this glob, e.g. '*.py'.")
    ignore_case: bool = Field(False, description="Case-insensitive match.")
    max_matches: int = Field(MAX_MATCHES, ge=1, le=2000)


class Grep(Tool):
    name = "grep"
    description = (
        "Search file contents with a regular expression. Returns 'path:line:text' rows; "
        "respects .gitignore; results are capped."
    )
    Args = GrepArgs

    def __init__(self, use_ripgrep: bool = True) -> None:
        self._rg = shutil.which("rg") if use_ripgrep else None

    def touches(self, args: GrepArgs) -> Touches:
        return Touches(reads=(args.path,))

    def run(self, args: GrepArgs, ctx: ToolContext) -> ToolResult:
        root = check_read(args.path, ctx)  # PathDenied: Toolset.dispatch reports it
        if not root.exists():
            return ToolResult(f"{display(root, ctx)}: no such file or directory", is_error=True)
        try:
            regex = re.compile(args.pattern, re.IGNORECASE if args.ignore_case else 0)
        except re.error as e:
            return ToolResult(f"invalid regular expression {args.pattern!r}: {e}", is_error=True)
        if self._rg:
            rows = self._ripgrep(args, root, ctx)
        else:
            rows = self._python(args, regex, root, ctx)
        truncated = len(rows) > args.max_matches
        rows = rows[: args.max_matches]
        rows, left_out = cut_rows(rows)
        out = "\n".join(rows) if rows else "(no matches)"
        if left_out:
            truncated = True
            out += (
                f"\n[truncated: {left_out} more matching rows left out after {LISTING_CHARS:,}"
                " characters; narrow the pattern or path]"
            )
        elif truncated:
            out += f"\n[truncated at {args.max_matches} matches; narrow the pattern or path]"
        return ToolResult(
            out, metadata={"truncated": truncated, "engine": "rg" if self._rg else "python"}
        )

    def _ripgrep(self, args: GrepArgs, root: Path, ctx: ToolContext) -> list[str]:
        cmd = [
            self._rg,
            "--line-number",
            "--no-heading",
            "--color",
            "never",
            "--max-columns",
            str(MAX_LINE),
            "--sort",
            "path",
            "--no-require-git",
            "--hidden",
            "--glob",
            "!.git",
            "--glob",
            "!.m3agent",
        ]
        # sorted, so a capped result is always the same subset; hidden files searched like
        # the Python walk does
        if args.ignore_case:
            cmd.append("-i")
        if args.glob:
            cmd += ["--glob", args.glob]
        cmd += ["-e", args.pattern, "--", str(root)]
        rows: list[str] = []
        # Read rows as they come and stop rg at the cap, so a huge result never piles up.
        with subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ctx.cwd
        ) as proc:
            for raw in proc.stdout or ():
                line = raw.decode("utf-8", "replace").rstrip("\n")
                file, _, rest = line.partition(":")
                if is_secret(Path(file), ctx):
                    continue
                rows.append(f"{display(Path(file), ctx)}:{rest}")
                if len(rows) > args.max_matches or ctx.cancel.is_set():
                    proc.kill()
                    break
        return sorted(rows, key=_row_key)

    def _python(
        self, args: GrepArgs, regex: re.Pattern[str], root: Path, ctx: ToolContext
    ) -> list[str]:
        name_re = re.compile("^(?:.*/)?" + _glob_to_regex(args.glob) + "$") if args.glob else None
        files = [root] if root.is_file() else (root / rel for rel, d in walk(root) if not d)
        rows: list[str] = []
        for f in files:
            if ctx.cancel.is_set() or len(rows) > args.max_matches:
                break
            rel = display(f, ctx)
            if (name_re and not name_re.match(rel)) or is_secret(f, ctx):
                continue
            try:
                if f.stat().st_size > MAX_FILE_BYTES:
                    continue
                data = f.read_bytes()
            except OSError:
                continue
            if looks_binary(data[:8192]):
                continue
            for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
                if regex.search(line):
                    rows.append(f"{rel}:{n}:{line[:MAX_LINE]}")
                    if len(rows) > args.max_matches:
                        break
        return rows


def _row_key(row: str) -> tuple[str, int]:
    file, _, rest = row.partition(":")
    num = rest.partition(":")[0]
    return (file, int(num) if num.isdigit() else 0)
