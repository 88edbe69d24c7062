"""Token counts with the model's own tokenizer, remembered across runs by content hash.

Counting a million tokens takes seconds; most files do not change between two starts, so the
count of each file section is kept in a small JSON file keyed by the tokenizer's fingerprint and
the section's SHA-1. A missing or unreadable cache only costs time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from m3agent.tools.private_fs import write_private


def tokenizer_fingerprint(tokenizer: Any) -> str:
    hf = getattr(tokenizer, "hf_tokenizer", None)
    source = hf.to_str() if hf is not None else type(tokenizer).__qualname__
    return hashlib.sha1(source.encode("utf-8")).hexdigest()[:16]


class TokenCounter:
    """count(texts) -> token counts, as `M3Tokenizer.encode_text` would give them."""

    def __init__(self, tokenizer: Any, cache_dir: Path | None = None):
        self.tokenizer = tokenizer
        self.fingerprint = tokenizer_fingerprint(tokenizer)
        self._path: Path | None = None
        self._known_cache: dict[str, int] | None = None  # read on first use
        self._dirty = False
        self.hits = 0
        self.misses = 0
        if cache_dir is not None:
            self._path = Path(cache_dir) / f"tokens-{self.fingerprint}.json"

    @property
    def _known(self) -> dict[str, int]:
        if self._known_cache is None:
            self._known_cache = {}
            try:
                if self._path is not None:
                    data = json.loads(self._path.read_text(encoding="utf-8"))
                    if isinstance(data, dict):
                        self._known_cache = {k: v for k, v in data.items() if isinstance(v, int)}
            except (OSError, ValueError):
                pass
        return self._known_cache

    def _encode(self, texts: Sequence[str]) -> list[int]:
        batch = getattr(self.tokenizer, "encode_text_batch", None)
        if batch is not None:
            return [len(ids) for ids in batch(texts)]
        one = getattr(self.tokenizer, "encode_text", None) or self.tokenizer.encode
        return [len(one(t)) for t in texts]

    def count(self, texts: Sequence[str], *, remember: bool = True) -> list[int]:
        if not remember:
            return self._encode(texts)
        keys = [hashlib.sha1(t.encode("utf-8", "surrogatepass")).hexdigest() for t in texts]
        todo = [i for i, k in enumerate(keys) if k not in self._known]
        self.hits += len(texts) - len(todo)
        self.misses += len(todo)
        if todo:
            for i, n in zip(todo, self._encode([texts[i] for i in todo]), strict=True):
                self._known[keys[i]] = n
            self._dirty = True
        return [self._known[k] for k in keys]

    def save(self) -> None:
        """Writes the cache atomically; entries of files no longer seen are kept (bounded)."""
        if self._path is None or not self._dirty:
            return
        if len(self._known) > 400_000:  # a runaway cache: start over rather than grow forever
            self._known_cache = {}
        try:
            write_private(self._path, json.dumps(self._known, separators=(",", ":")))
            self._dirty = False
        except OSError:
            pass  # only a cache
