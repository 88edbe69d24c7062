"""grep: regex search over files; ripgrep when installed, a Python walk otherwise."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from pydantic import BaseModel, Field

from .base import Capability, Tool, ToolContext, ToolResult, Touches
from .bounds import LISTING_CHARS, cut_rows
from .fdio import FsRefused, open_regular
from .fsutil import looks_binary
from .globs import glob_to_regex
from .host_programs import which
from .ignore import walk
from .paths import check_read, display, hardlinks_allowed, is_secret

MAX_MATCHES = 200
MAX_LINE = 400
MAX_FILE_BYTES = 5_000_000  # the Python fallback skips larger files, as rg's defaults would not


class GrepArgs(BaseModel):
    pattern: str = Field(description="Regular expression (Rust/Python syntax).")
    path: str = Field(".", description="File or directory to search.")
    glob: str | None = Field(None, description="Only search files matching this glob, e.g. '*.py'.")
    ignore_case: bool = Field(False, description="Case-insensitive match.")
    max_matches: int = Field(MAX_MATCHES, ge=1, le=2000)


class Grep(Tool[GrepArgs]):
    name = "grep"
    claude_names = ("Grep",)
    capability = Capability.READ
    kind = "search"
    description = (
        "Search file contents with a regular expression. Returns 'path:line:text' rows; "
        "respects .gitignore; results are capped."
    )

    def __init__(self, use_ripgrep: bool = True) -> None:
        # found only outside the workspace (tools/host_programs.py): it runs on the host
        self._rg = which("rg") if use_ripgrep else None

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
        rg = which("rg", (ctx.cwd,)) if self._rg else None
        if rg:
            rows = _confirm(self._ripgrep(rg, args, root, ctx), regex, ctx)
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
            out, metadata={"truncated": truncated, "engine": "rg" if rg else "python"}
        )

    def _ripgrep(
        self, rg: str, args: GrepArgs, root: Path, ctx: ToolContext
    ) -> list[tuple[Path, int]]:
        cmd = [
            rg,
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
        rows: list[tuple[Path, int]] = []
        # Read rows as they come and stop rg at the cap, so a huge result never piles up.
        with subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ctx.cwd
        ) as proc:
            for raw in proc.stdout or ():
                fname, _, rest_b = raw.rstrip(b"\n").partition(b":")
                num = rest_b.partition(b":")[0]
                if not num.isdigit():
                    continue
                file = Path(os.fsdecode(fname))  # a non-UTF-8 name stays addressable
                if is_secret(file, ctx):
                    continue
                rows.append((file, int(num)))
                if len(rows) > args.max_matches or ctx.cancel.is_set():
                    proc.kill()
                    break
        return sorted(rows)

    def _python(
        self, args: GrepArgs, regex: re.Pattern[str], root: Path, ctx: ToolContext
    ) -> list[str]:
        name_re = re.compile("^(?:.*/)?" + glob_to_regex(args.glob) + "$") if args.glob else None
        files = [root] if root.is_file() else (root / rel for rel, d in walk(root) if not d)
        rows: list[str] = []
        for f in files:
            if ctx.cancel.is_set() or len(rows) > args.max_matches:
                break
            rel = display(f, ctx)
            if (name_re and not name_re.match(rel)) or is_secret(f, ctx):
                continue
            try:  # by descriptor, no symlink followed, no hard-linked file (tools/fdio.py)
                fd = open_regular(Path(os.path.abspath(f)), rel, hardlinks_allowed(f, ctx))
            except (OSError, FsRefused):
                continue
            with os.fdopen(fd, "rb") as fh:
                if os.fstat(fd).st_size > MAX_FILE_BYTES:
                    continue
                data = fh.read()
            if looks_binary(data[:8192]):
                continue
            for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
                if regex.search(line):
                    rows.append(f"{rel}:{n}:{line[:MAX_LINE]}")
                    if len(rows) > args.max_matches:
                        break
        return rows


def _confirm(hits: list[tuple[Path, int]], regex: re.Pattern[str], ctx: ToolContext) -> list[str]:
    """ripgrep finds (file, line); the text shown is read again here, by descriptor (no
    symlink followed, no hard-linked file: tools/fdio.py), and must match again. ripgrep
    opens files by name, so a directory swapped for a symlink mid-search could hand it a
    file outside the workspace; what it read is never shown."""
    rows: list[str] = []
    by_file: dict[Path, list[int]] = {}
    for file, n in hits:
        by_file.setdefault(file, []).append(n)
    for file, nums in by_file.items():
        path = Path(os.path.abspath(Path(ctx.cwd) / file))
        shown = display(path, ctx)
        try:
            fd = open_regular(path, shown, hardlinks_allowed(path, ctx))
        except (OSError, FsRefused):
            continue
        want = set(nums)
        with os.fdopen(fd, "rb") as f:
            for n, raw in enumerate(f, start=1):
                if n in want:
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    if regex.search(line):
                        rows.append(f"{shown}:{n}:{line[:MAX_LINE]}")
                    want.discard(n)
                    if not want:
                        break
    return rows
