"""Source-like filler of about N tokens for the benchmarks that serve a tiny random M3 (its
byte-level tokenizer: about one token per character). Imported by name: the scripts put this
folder on their path."""

from __future__ import annotations


def repeated_lines(tokens: int, line: str) -> str:
    """`line` formatted with i = 0, 1, 2, ... until the text holds at least `tokens`
    characters."""
    out: list[str] = []
    size = 0
    i = 0
    while size < tokens:
        s = line.format(i=i)
        out.append(s)
        size += len(s)
        i += 1
    return "".join(out)
