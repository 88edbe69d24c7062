"""MiniMax M3's marker strings (SPEC §1.9, §4.2, §4.8, §5.3), in one place.

Special tokens are dropped by `decode(skip_special_tokens=True)`; the namespace marker and the
think markers are non-special added tokens, so they survive it (the parsers work on text).
"""

from __future__ import annotations

from ..api import THINKING_MODES, ThinkingMode

BOS = "]~!b["  # begin of document
ROLE = "]~b]"  # begin of a role turn
EOS = "[e~["  # end of turn / end of sequence
IMAGE = "]<]image[>["
VIDEO = "]<]video[>["
IMAGE_START = "]<]start of image[>["
IMAGE_END = "]<]end of image[>["

NS = "]<]minimax[>["  # namespace marker that prefixes every structural tag of a tool call
THINK_START = "<mm:think>"
THINK_END = "</mm:think>"

TOOL_CALL_START = NS + "<tool_call>"
TOOL_CALL_END = NS + "</tool_call>"
INVOKE_START = NS + "<invoke"
INVOKE_END = NS + "</invoke>"

SPECIAL_TOKENS: tuple[str, ...] = (BOS, ROLE, EOS, IMAGE, VIDEO, IMAGE_START, IMAGE_END)
NON_SPECIAL_ADDED_TOKENS: tuple[str, ...] = (NS, THINK_START, THINK_END)
ALL_ADDED_TOKENS: tuple[str, ...] = SPECIAL_TOKENS + NON_SPECIAL_ADDED_TOKENS


def check_thinking_mode(mode: str) -> ThinkingMode:
    if mode not in THINKING_MODES:
        raise ValueError(f"thinking mode must be one of {', '.join(THINKING_MODES)}, not {mode!r}")
    return ThinkingMode(mode)


def held_suffix_len(buf: str, markers: tuple[str, ...]) -> int:
    """Length of the longest tail of `buf` that could still grow into one of `markers`.

    Streaming parsers withhold that tail until the next chunk (or the end) decides it.
    """
    best = 0
    for marker in markers:
        for k in range(min(len(marker) - 1, len(buf)), best, -1):
            if buf.endswith(marker[:k]):
                best = k
                break
    return best
