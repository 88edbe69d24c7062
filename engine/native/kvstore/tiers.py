"""The tiers below the engine's own KV cache, and the one place that moves pages between them.

A tier keeps pages by PageKey (the block-hash chain's key) as bytes in the page layout: every
layer's K/V block, then its index-key block, in layer order. The disk tier (disk.py) is the only
one today; a host-memory tier would implement the same three calls and sit first in the list
(looked up before the disk, written through to both).

`PageTiers` binds the tiers to the engine's cache tensors: `save` copies a block that just
became full and cached out of the cache and hands it to every tier that lacks it; `restore`
fills a free block from the first tier holding the page. KVCacheManager calls both (core only
knows the `BlockTiers` protocol).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from ..core.model_api import LayerCache
from .page_file import PageKey


class PageTier(Protocol):
    def contains(self, key: PageKey) -> bool:
        """True when the page is (or is being) kept: saving it again is useless."""
        ...

    def get(self, key: PageKey) -> memoryview | None:
        """The page's bytes in the layout order, only for an intact page naming this key."""
        ...

    def put(self, key: PageKey, tensors: Sequence[torch.Tensor]) -> bool:
        """Keeps host copies of a page's tensors (the tier owns them now); False: not kept."""
        ...

    def close(self) -> None: ...


class PageTiers:
    def __init__(self, caches: list[LayerCache], tiers: Sequence[PageTier]) -> None:
        self.caches = caches
        self.tiers = tuple(tiers)

    @staticmethod
    def payload_bytes(caches: list[LayerCache]) -> int:
        """Bytes of one page: a block of every cache tensor."""
        return sum(t[0].nbytes for t in _tensors(caches))

    def _blocks(self, block_id: int) -> list[torch.Tensor]:
        return [t[block_id] for t in _tensors(self.caches)]

    def save(self, block_id: int, key: PageKey) -> None:
        missing = [t for t in self.tiers if not t.contains(key)]
        if not missing:
            return
        host = [b.to("cpu", copy=True) for b in self._blocks(block_id)]
        for tier in missing:
            tier.put(key, host)

    def restore(self, block_id: int, key: PageKey) -> bool:
        for tier in self.tiers:
            payload = tier.get(key)
            if payload is None:
                continue
            src = torch.frombuffer(payload, dtype=torch.uint8)
            offset = 0
            for block in self._blocks(block_id):
                dst = block.view(torch.uint8)
                n = dst.numel()
                dst.copy_(src[offset : offset + n].view(dst.shape))
                offset += n
            return True
        return False

    def close(self) -> None:
        for tier in self.tiers:
            tier.close()


def _tensors(caches: list[LayerCache]) -> list[torch.Tensor]:
    """The cache tensors a page spans, in the page's order."""
    out: list[torch.Tensor] = []
    for c in caches:
        out.append(c.kv)
        if c.index is not None:
            out.append(c.index)
    return out
