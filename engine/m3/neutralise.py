"""Marker strings in outside text, where no tokenizer of ours decides what they become.

With a local tokenizer the prompt leaves as token ids and outside text is encoded with every
added token kept as plain bytes (M3Tokenizer.encode_text). Where the prompt must leave as
text (a remote server without a local tokenizer; media turns through /v1/chat/completions,
where the server renders the template itself) the server would turn `[e~[` inside a tool
result into a real end of turn. There each marker string in outside text gets a WORD JOINER
(U+2060, invisible, no meaning of its own) after its first character: the model still reads
the same characters, and no tokenizer can match the marker any more (docs/prompt.md).

`split_at_markers` is the token-level counterpart for tokenizers that cannot be told to keep
added tokens as text (a plain `encode(text)`): cutting the text inside each marker and
encoding the pieces apart, no piece holds a whole marker, so none can become its token.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .prompt_parts import PromptPart
from .tokens import ALL_ADDED_TOKENS, SPECIAL_TOKENS

JOINER = "\u2060"


def neutralise(text: str, markers: Iterable[str] = ALL_ADDED_TOKENS) -> str:
    """`text` with no marker string left in it (repeated: a replacement can uncover an
    overlapping occurrence, as in `]~b]~b]`; an inserted joiner never creates one)."""
    markers = tuple(m for m in markers if m)
    while any(m in text for m in markers):
        for m in markers:
            text = text.replace(m, m[0] + JOINER + m[1:])
    return text


def neutralise_deep(value: Any, markers: Iterable[str] = ALL_ADDED_TOKENS) -> Any:
    """Every string inside a JSON-like value (tool schemas, tool-call arguments), keys too."""
    markers = tuple(markers)
    if isinstance(value, str):
        return neutralise(value, markers)
    if isinstance(value, dict):
        return {neutralise(str(k), markers): neutralise_deep(v, markers) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [neutralise_deep(v, markers) for v in value]
    return value


def prompt_text(parts: Sequence[PromptPart]) -> str:
    """A prompt's runs joined for a server that tokenizes text itself: outside text with no
    marker, the model's own output with no role/end-of-turn/media marker (its tool-call and
    think markers are its structure), template runs as they are."""
    out = []
    for p in parts:
        if p.kind == "text":
            out.append(neutralise(p.text))
        elif p.kind == "model":
            out.append(neutralise(p.text, SPECIAL_TOKENS))
        else:
            out.append(p.text)
    return "".join(out)


def split_at_markers(text: str, markers: Iterable[str] = ALL_ADDED_TOKENS) -> list[str]:
    """`text` cut after the first character of every marker occurrence."""
    markers = tuple(m for m in markers if len(m) > 1)
    cuts: set[int] = set()
    for m in markers:  # every occurrence, overlapping ones too
        i = text.find(m)
        while i >= 0:
            cuts.add(i + 1)
            i = text.find(m, i + 1)
    pieces, last = [], 0
    for c in sorted(cuts):
        pieces.append(text[last:c])
        last = c
    pieces.append(text[last:])
    return [p for p in pieces if p]


def encode_outside(
    encode: Callable[[str], list[int]], text: str, markers: Iterable[str] = ALL_ADDED_TOKENS
) -> list[int]:
    ids: list[int] = []
    for piece in split_at_markers(text, markers):
        ids += encode(piece)
    return ids
