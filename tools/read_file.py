"""read_file: text with line numbers, line ranges, binary and size guards."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import BinaryIO

from pydantic import BaseModel, Field

from .base import Capability, Tool, ToolContext, ToolResult, Touches
from .fdio import FsRefused, open_regular
from .fsutil import looks_binary
from .paths import check_read, display, hardlinks_allowed

MAX_WHOLE_BYTES = 2_000_000  # larger files must be read by line range
MAX_OUTPUT_CHARS = 100_000
MAX_LINE_BYTES = 8_000  # a longer line is cut (and says so)


def _lines(f: BinaryIO) -> Iterator[tuple[bytes, int]]:
    """(line, bytes cut from its end): a line is held only up to MAX_LINE_BYTES, so one
    enormous line (a minified bundle, /dev/zero behind a name) cannot fill memory."""
    while True:
        raw = f.readline(MAX_LINE_BYTES)
        if not raw:
            return
        rest = 0
        if not raw.endswith(b"\n"):
            while True:  # skip the rest of the line, counting it
                more = f.readline(1 << 16)
                rest += len(more)
                if not more or more.endswith(b"\n"):
                    break
        yield raw, rest


def _decode_head(raw: bytes) -> str:
    """A cut line may end inside a UTF-8 character: drop its 1-3 bytes, not mark the file."""
    for k in range(4):
        try:
            return raw[: len(raw) - k].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return raw.decode("utf-8")  # raises: invalid before the cut


class ReadFileArgs(BaseModel):
    path: str = Field(description="File path, relative to the workspace or absolute.")
    offset: int = Field(1, ge=1, description="First line to read (1-based).")
    limit: int = Field(2000, ge=1, le=20000, description="Maximum number of lines to read.")


class ReadFile(Tool[ReadFileArgs]):
    name = "read_file"
    claude_names = ("Read",)
    capability = Capability.READ
    kind = "read"
    description = (
        "Read a text file. Returns lines prefixed with their 1-based line numbers. "
        "Use offset/limit to read part of a large file."
    )

    def touches(self, args: ReadFileArgs) -> Touches:
        return Touches(reads=(args.path,))

    def run(self, args: ReadFileArgs, ctx: ToolContext) -> ToolResult:
        path = check_read(args.path, ctx)  # PathDenied: Toolset.dispatch reports it
        shown = display(path, ctx)
        try:  # by descriptor, following no symlink: the file checked is the file read
            fd = open_regular(path, shown, links_ok=hardlinks_allowed(path, ctx))
        except FsRefused as e:
            msg = str(e)
            if msg.endswith("is a directory"):
                msg += "; use list_dir"
            elif msg.endswith("no such file or directory"):
                msg = f"{shown}: no such file"
            return ToolResult(msg, is_error=True)
        st = os.fstat(fd)
        size = st.st_size
        ranged = args.offset != 1 or "limit" in args.model_fields_set
        if size > MAX_WHOLE_BYTES and not ranged:
            os.close(fd)
            return ToolResult(
                f"{shown}: file is {size / 1e6:.1f} MB, too large to read whole; "
                "pass offset and limit to read a line range, or use grep",
                is_error=True,
            )
        with os.fdopen(fd, "rb") as f:
            if looks_binary(f.read(8192)):
                return ToolResult(f"{shown}: binary file ({size} bytes); not shown", is_error=True)
            f.seek(0)
            lines: list[str] = []
            chars = 0
            bad_utf8 = False
            truncated = False
            last = args.offset + args.limit - 1
            n = 0
            long_lines = 0
            for n, (raw, rest) in enumerate(_lines(f), start=1):
                if n < args.offset:
                    continue
                if n > last:
                    truncated = True
                    break
                try:
                    text = _decode_head(raw) if rest else raw.decode("utf-8")
                except UnicodeDecodeError:
                    bad_utf8 = True
                    text = raw.decode("utf-8", errors="replace")
                text = text.rstrip("\r\n")
                if rest:
                    long_lines += 1
                    text += f" [line cut: {rest:,} more bytes]"
                row = f"{n:6}\t{text}"
                chars += len(row) + 1
                if chars > MAX_OUTPUT_CHARS:
                    truncated = True
                    break
                lines.append(row)
        out = "\n".join(lines)
        if not lines and n < args.offset and size:
            return ToolResult(
                f"{shown}: has only {n} lines; offset {args.offset} is past the end", is_error=True
            )
        notes = []
        if long_lines:
            notes.append(
                f"[note: {long_lines} line(s) longer than {MAX_LINE_BYTES:,} bytes were "
                "cut; grep finds text inside them]"
            )
        if bad_utf8:
            notes.append(
                "[note: the file is not valid UTF-8; undecodable bytes are shown as U+FFFD]"
            )
        if truncated:
            notes.append(
                f"[truncated: more lines follow line {args.offset + len(lines) - 1}; read on with offset]"
            )
        if notes:
            out = out + "\n" + "\n".join(notes)
        return ToolResult(out if out else "(empty file)", metadata={"truncated": truncated})
