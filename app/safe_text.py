"""Terminal-safe text: what a repository, a tool or the model wrote never drives the terminal.

Tool output, file names and model text can hold escape sequences: OSC 52 writes the user's
clipboard, OSC 0/2 retitle the window, CSI clears the screen or moves the cursor to forge
output, C1 controls (U+0080-U+009F) do the same on terminals that honour them, and bidi
overrides reorder what is shown (Trojan Source). Every control character is made visible, one
character at a time, so a sequence split across streamed deltas is caught as well:

- text for a terminal: `visible()` writes ESC as `\\x1b`, a C1 control as `\\x9b`, a bidi
  control as `\\u202e` (newline and tab stay; CRLF becomes a newline);
- a value shown for a trust decision (a hook's command, an MCP server's command line, a
  rule from a project's settings): `one_line()` spells out *every* character that is not
  printable, newline, tab and CR included, and zero-width and tag characters as well, so
  what the user approves is shown exactly and on the one line it claims: no `\r` or ESC
  sequence overwrites it with a harmless look, no newline forges a second entry;
- JSON: `json.dumps` already escapes C0; `dumps()` also escapes DEL, C1, bidi controls and
  U+2028/U+2029, so the JSON text holds no raw control character and still parses to the
  exact original string.

Every front end goes through these: the CLI's trust commands (`hooks list|trust`, `mcp
list|get|trust`) write `trust_lines()`, the TUI's notices are `visible()` and the values in
them `one_line()`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, TextIO

# Unicode bidirectional formatting characters: embeddings, overrides, isolates, marks.
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_KEEP = {0x09, 0x0A}  # tab and newline: plain layout, nothing a terminal acts on


def _terminal_table() -> dict[int, str]:
    table = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))}
    for c in _KEEP:
        del table[c]
    table.update({c: f"\\u{c:04x}" for c in _BIDI})
    return table


def _json_table() -> dict[int, str]:
    # C0 is json.dumps's own business (it escapes every character below 0x20).
    chars = (0x7F, *range(0x80, 0xA0), *_BIDI, 0x2028, 0x2029)
    return {c: f"\\u{c:04x}" for c in chars}


_TERMINAL = _terminal_table()
_JSON = _json_table()


def visible(text: str) -> str:
    """The text with every terminal control character spelled out (`\\x1b`, `\\u202e`)."""
    if text.isprintable():  # the common case: nothing to do (newlines are not printable)
        return text
    return text.replace("\r\n", "\n").translate(_TERMINAL)


def _escape(c: str) -> str:
    n = ord(c)
    if n < 0x100:
        return f"\\x{n:02x}"
    return f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def one_line(text: str) -> str:
    """`text` exactly, on one line: every character Python does not call printable (controls,
    newline, tab, CR, bidi and zero-width formatting, tag characters, separators other than
    the space) spelled out as `\\x0a`, `\\u202e`, `\\U000e0041`; a backslash stays as is."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def write_trust_lines(stream: TextIO, lines: Iterable[str]) -> None:
    """Lines shown for a trust decision, each through one_line(), to `stream`."""
    stream.write("".join(one_line(line) + "\n" for line in lines))


def dumps(obj: Any) -> str:
    """One line of JSON with no raw control character in it (see the module docstring)."""
    return json.dumps(obj, ensure_ascii=False, default=str).translate(_JSON)


def short_json(obj: Any, limit: int = 80) -> str:
    """`dumps(obj)` cut to `limit` characters (an ellipsis ending what was cut)."""
    text = dumps(obj)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class SafeStream:
    """A text stream that writes `visible()` text: text-mode output goes through one of these,
    so no renderer path can forget it."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(visible(text))

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()
