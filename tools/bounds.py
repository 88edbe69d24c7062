"""Bounds on what a tool returns: every result is resent on each later request, so none may be
unbounded (an edit of a 1.5 MB file once returned its whole 3.2 MB diff). Each cut says what
was cut, so the model knows to look further (read_file, a narrower grep) instead of guessing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from .base import ToolResult

# What the model sees of a diff (edit_file, apply_patch); the change itself is never cut.
DIFF_LINES = 200
DIFF_BYTES = 16_384
# What front ends get in metadata["diff"] (shown to the user, kept in the session log).
META_DIFF_LINES = 5_000
META_DIFF_BYTES = 512_000
# Listing tools (grep, glob, list_dir): rows kept whole, up to this many characters.
LISTING_CHARS = 64_000
# The last net for any tool result (Toolset.dispatch): head and tail kept, middle cut.
RESULT_CHARS = 512_000


APPLIED = "the change itself was applied in full; read_file shows the result"
NOT_APPLIED = "nothing is changed until the call runs"  # a preview's cut (Tool.preview)


def cut_diff(
    lines: Iterable[str],
    max_lines: int = DIFF_LINES,
    max_bytes: int = DIFF_BYTES,
    after: str = APPLIED,
    what: str = "diff",
) -> tuple[str, str]:
    """(the diff's head within both bounds, a note saying what was cut, or "").

    `lines` may be a generator (difflib.unified_diff): the rest is counted, not kept.
    `after` ends the note: what became of the part not shown; `what` names the text."""
    kept: list[str] = []
    size = 0
    total_lines = 0
    total_bytes = 0
    full = False
    for line in lines:
        n = len(line.encode("utf-8", "surrogatepass"))
        total_lines += 1
        total_bytes += n
        if not full and total_lines <= max_lines and size + n <= max_bytes:
            kept.append(line)
            size += n
        else:
            room = max_bytes - size
            if not full and total_lines <= max_lines and room > 200:  # a huge line: its head
                piece = line[: (room - 40) // 4] + " [line cut]\n"  # (<= 4 bytes a character)
                kept.append(piece)
                size += len(piece.encode("utf-8", "surrogatepass"))
            full = True  # a contiguous head: nothing after the first cut line is kept
    text = "".join(kept)
    if len(kept) == total_lines:
        return text, ""
    if text and not text.endswith("\n"):
        text += "\n"
    note = (
        f"[{what} cut: showing {len(kept)} of {total_lines} lines ({size:,} of "
        f"{total_bytes:,} bytes); {after}]"
    )
    return text, note


def bounded_diff(lines: list[str]) -> tuple[str, str, str]:
    """(diff for the model, its cut note, diff for metadata) from one list of diff lines."""
    shown, note = cut_diff(lines)
    meta, meta_note = cut_diff(lines, META_DIFF_LINES, META_DIFF_BYTES)
    return shown, note, meta + (meta_note + "\n" if meta_note else "")


def preview_diff(lines: list[str]) -> tuple[str, str]:
    """(the diff a front end is shown before the call, its cut note): the same head as the
    result's metadata["diff"] (bounded_diff), so the preview is the diff the call makes."""
    return cut_diff(lines, META_DIFF_LINES, META_DIFF_BYTES, NOT_APPLIED)


def preview_text(text: str, what: str) -> tuple[str, str]:
    """(a command or request as a front end is shown it before the call, its cut note):
    bounded like a diff preview; the call itself gets the whole text."""
    return cut_diff(
        text.splitlines(keepends=True), META_DIFF_LINES, DIFF_BYTES, "the call gets it whole", what
    )


def cut_rows(rows: list[str], max_chars: int = LISTING_CHARS) -> tuple[list[str], int]:
    """(the first rows that fit in max_chars with their newlines, how many were left out)."""
    used = 0
    for i, row in enumerate(rows):
        used += len(row) + 1
        if used > max_chars:
            return rows[:i], len(rows) - i
    return rows, 0


def cut_middle(text: str, max_chars: int = RESULT_CHARS) -> tuple[str, bool]:
    """Keep the first and last halves of max_chars; the note names the characters cut."""
    if len(text) <= max_chars:
        return text, False
    half = max_chars // 2
    cut = len(text) - 2 * half
    return (
        f"{text[:half]}\n[result cut: {cut:,} characters left out of {len(text):,} here]\n"
        f"{text[-half:]}"
    ), True


def cut_result(result: ToolResult, max_chars: int = RESULT_CHARS) -> ToolResult:
    """`result` with its output cut as cut_middle cuts it, marked `truncated`. Its images keep
    their places in the text: one in the kept head stays where it was, one in the kept tail
    moves with that text, one in the part cut out goes with it."""
    text, cut = cut_middle(result.output, max_chars)
    if not cut:
        return result
    old, half = len(result.output), max_chars // 2
    shift = len(text) - old
    media = tuple(
        (kind, path, off if off <= half else off + shift)
        for kind, path, off in result.media
        if off <= half or off >= old - half
    )
    meta = {**result.metadata, "truncated": True}
    return replace(result, output=text, metadata=meta, media=media)
