"""Streaming detokenisation: text deltas from token ids, never splitting a UTF-8 character.

Each step decodes a short window of recent tokens twice (with and without the new ones) and
emits the difference, so byte-level BPE pieces that only form a character together are held
back until they do, and tokenizers that drop a leading space at the start of a decode still
produce the spaces between tokens.
"""

from __future__ import annotations

from typing import Protocol


class TokenizerLike(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, token_ids: list[int]) -> str: ...


class IncrementalDetokenizer:
    def __init__(self, tokenizer: TokenizerLike, context_ids: list[int] | None = None) -> None:
        self.tokenizer = tokenizer
        # A few prompt tokens give the first output token its left context (spaces).
        self._ids: list[int] = list((context_ids or [])[-6:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self.text = ""

    def add_tokens(self, token_ids: list[int]) -> str:
        self._ids.extend(token_ids)
        prefix = self.tokenizer.decode(self._ids[self._prefix_offset : self._read_offset])
        full = self.tokenizer.decode(self._ids[self._prefix_offset :])
        if len(full) <= len(prefix) or full.endswith("\ufffd"):
            return ""  # an incomplete character: wait for the next token
        delta = full[len(prefix) :]
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        self.text += delta
        return delta

    def flush(self) -> str:
        """Whatever is still held back, decoded as is (at the end of generation)."""
        prefix = self.tokenizer.decode(self._ids[self._prefix_offset : self._read_offset])
        full = self.tokenizer.decode(self._ids[self._prefix_offset :])
        delta = full[len(prefix) :] if len(full) > len(prefix) else ""
        self._prefix_offset = self._read_offset = len(self._ids)
        self.text += delta
        return delta
