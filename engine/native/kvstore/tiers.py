"""The tiers below the engine's own KV cache, and the one place that moves pages between them.

A tier keeps pages by PageKey (the block-hash chain's key) as bytes in the page layout: every
layer's K/V block, then its index-key block, in layer order. The disk tier (disk.py) is the only
one. The host-memory tier (runner/host_kv_tier.py) is not one of them: with it on, the cache's
own K/V tensors of the MSA layers are its host pools, which `save` and `restore` read and write.

`PageTiers` binds the tiers to the engine's cache tensors: `save` copies a block that just
became full and cached out of the cache and hands it to every tier that lacks it; `restore`
fills a free block from the first tier holding the page, then tells `on_restored` (the
host-memory tier, whose cache tensors are its host pools, drops its device copies of the
block). KVCacheManager calls both (core only knows the `BlockTiers` protocol).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy
import torch

from ..core.model_api import LayerCache
from .page_file import PageKey


class PageTier(Protocol):
    def contains(self, key: PageKey) -> bool:
        """True when the page is (or is being) kept: saving it again is useless."""
        ...

    def get(self, key: PageKey) -> memoryview | None:
        """The page's bytes in the layout order, only for an intact page naming this key;
        valid until the next call (the caller copies them into the cache at once)."""
        ...

    def prefetch(self, keys: Sequence[PageKey]) -> None:
        """A hint: `get` will ask for these pages in this order (empty: no more)."""
        ...

    def put(self, key: PageKey, tensors: Sequence[torch.Tensor]) -> bool:
        """Keeps a page: host uint8 copies of its blocks, in the layout order (the tier owns
        them now); False: not kept."""
        ...

    def close(self) -> None: ...


class PageTiers:
    def __init__(
        self,
        caches: list[LayerCache],
        tiers: Sequence[PageTier],
        on_restored: Callable[[list[int]], None] | None = None,
    ) -> None:
        self.caches = caches
        self.tiers = tuple(tiers)
        self.on_restored = on_restored
        # Into host caches (the CPU's, the host tier's pools) a page is read, checked and
        # copied on the engine thread, through the tier's one reused buffer: reading ahead on
        # a thread into fresh buffers costs their page faults, more than the overlap saves
        # on a busy machine (bench/kv_restore_profile.py); a GPU's copies overlap the reads.
        self.read_ahead = any(t.device.type != "cpu" for t in _tensors(caches))
        # each host cache tensor's bytes as [blocks, block bytes], made once: a restore
        # copies a page into them with one numpy slice assignment per tensor (a plain memcpy:
        # torch's copy_ spreads a small copy over its threads, and into cache memory not
        # touched yet, their page faults contend: measured 12 ms per 256 KiB, against 0.03)
        self._host_rows = [
            t.view(torch.uint8).numpy().reshape(t.shape[0], -1) if t.device.type == "cpu" else None
            for t in _tensors(caches)
        ]
        # What restoring cost so far: pages, bytes, seconds (read, checked, copied in).
        self.restored_pages = 0
        self.restored_bytes = 0
        self.restore_s = 0.0
        self.save_s = 0.0  # the engine thread's share of saving: copying pages out

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
        t0 = time.perf_counter()
        host = [_copy_out(b) for b in self._blocks(block_id)]
        for tier in missing:
            tier.put(key, host)
        self.save_s += time.perf_counter() - t0

    def prefetch(self, keys: Sequence[PageKey]) -> None:
        if not self.read_ahead:
            return
        for tier in self.tiers:
            tier.prefetch(keys)

    def restore(self, block_id: int, key: PageKey) -> bool:
        t0 = time.perf_counter()
        try:
            for tier in self.tiers:
                payload = tier.get(key)
                if payload is None:
                    continue
                offset = 0
                data = numpy.frombuffer(payload, dtype=numpy.uint8)
                for rows, block in zip(self._host_rows, self._blocks(block_id), strict=True):
                    n = block.nbytes
                    if rows is not None:
                        rows[block_id] = data[offset : offset + n]
                    else:
                        _copy_in(block, payload[offset : offset + n])
                    offset += n
                if self.on_restored is not None:
                    self.on_restored([block_id])
                self.restored_pages += 1
                self.restored_bytes += offset
                return True
            return False
        finally:
            self.restore_s += time.perf_counter() - t0

    def close(self) -> None:
        for tier in self.tiers:
            tier.close()


def _copy_out(block: torch.Tensor) -> torch.Tensor:
    """A host copy of one block's bytes (uint8), numpy's memcpy on the CPU (see _copy_in)."""
    raw = block.view(torch.uint8)
    if raw.device.type == "cpu":
        return torch.from_numpy(raw.numpy().copy())
    return raw.to("cpu")


def _copy_in(block: torch.Tensor, data: memoryview) -> None:
    """Copies a page's bytes into one block of a device (GPU) cache tensor."""
    dst = block.view(torch.uint8)
    dst.copy_(torch.frombuffer(data, dtype=torch.uint8).view(dst.shape))


def _tensors(caches: list[LayerCache]) -> list[torch.Tensor]:
    """The cache tensors a page spans, in the page's order."""
    out: list[torch.Tensor] = []
    for c in caches:
        out.append(c.kv)
        if c.index is not None:
            out.append(c.index)
    return out
