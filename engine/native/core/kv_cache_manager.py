"""The scheduler's only view of the KV cache: prefix lookups, slot allocation, freeing.

Blocks are indexed for prefix caching after the step that computed them (`cache_blocks`), so a
block is never found by a lookup before its K/V and index keys are really in the cache.

With lower tiers (kvstore/: the disk), a block that becomes cached is also offered to them, and
a lookup that runs out of cached blocks goes on in the tiers: each page found there is read into
a free block, indexed like a computed one, and counted as a hit (Request.num_restored_tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..kvstore.page_file import PageKey
from .attention_metadata import BLOCK_SIZE
from .block_hash import BlockHashFn, hash_block_tokens, token_bytes
from .block_pool import BlockPool, KVCacheBlock
from .request import Request


class BlockTiers(Protocol):
    """The pages below the cache (kvstore.tiers.PageTiers)."""

    def save(self, block_id: int, key: PageKey) -> None:
        """Offers a block that is now full and cached (its K/V and index keys computed)."""
        ...

    def restore(self, block_id: int, key: PageKey) -> bool:
        """Fills the block from a kept page of this key; False: none (nothing written)."""
        ...

    def prefetch(self, keys: Sequence[PageKey]) -> None:
        """The keys `restore` will be asked for next, in order (empty: none)."""
        ...


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int = BLOCK_SIZE,
        enable_caching: bool = True,
        hash_fn: BlockHashFn = hash_block_tokens,
        tiers: BlockTiers | None = None,
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.hash_fn = hash_fn
        self.block_pool = BlockPool(num_blocks, enable_caching)
        self.tiers = tiers if enable_caching else None
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        # Each request's block ids as a tuple, extended as its (append-only) list grows: a
        # decode step at 1M tokens would otherwise rebuild 8192 ids per request in Python.
        self._block_ids: dict[str, tuple[int, ...]] = {}
        self._num_cached_blocks: dict[str, int] = {}
        # Prefix-cache statistics, in tokens.
        self.num_queried_tokens = 0
        self.num_hit_tokens = 0

    @property
    def num_usable_blocks(self) -> int:
        return self.block_pool.num_blocks - 1

    @property
    def usage(self) -> float:
        return self.block_pool.usage

    def max_tokens_in_cache(self) -> int:
        return self.num_usable_blocks * self.block_size

    def _update_hashes(
        self, request: Request, upto: int | None = None, data: memoryview | None = None
    ) -> None:
        """Hashes the request's full blocks below `upto` not hashed yet (each only once).

        `data`, when given, is the int64 bytes of the request's tokens from position 0, so a
        lookup converts a long prompt once for both hashing and the token check.
        """
        bs, hashes = self.block_size, request.block_hashes
        end = request.num_tokens // bs if upto is None else upto
        start = len(hashes)
        if start >= end:
            return
        if request.mm_inputs is not None:  # same placeholder ids, different pictures
            from ..runner.mm_inputs import extend_block_hashes_mm

            extend_block_hashes_mm(
                hashes,
                request.token_slice(0, end * bs),
                bs,
                self.hash_fn,
                request.mm_inputs,
            )
            return
        step = bs * 8
        if data is None:
            data, offset = token_bytes(request.token_slice(start * bs, end * bs)), start * step
        else:
            offset = 0
        for i in range(start, end):
            parent = hashes[i - 1] if i else None
            j = i * step - offset
            hashes.append(self.hash_fn(parent, data[j : j + step], ()))

    def get_computed_blocks(self, request: Request) -> tuple[list[KVCacheBlock], int]:
        """The longest run of cached full blocks that starts the request's tokens.

        The last token is always left to compute, so that the step produces its logits.
        """
        if not self.enable_caching:
            return [], 0
        bs, step = self.block_size, self.block_size * 8
        max_blocks = (request.num_tokens - 1) // bs
        data = token_bytes(request.token_slice(0, max_blocks * bs))
        self._update_hashes(request, max_blocks, data)
        hits: list[KVCacheBlock] = []
        parent: bytes | None = None
        for i in range(max_blocks):
            block_bytes = data[i * step : (i + 1) * step]
            block = self.block_pool.get_cached_block(request.block_hashes[i], parent, block_bytes)
            if block is None:
                break
            hits.append(block)
            parent = request.block_hashes[i]
        if self.tiers is not None and len(hits) < max_blocks:
            restored = self._restore(request, hits, data, max_blocks)
            if request.num_cached_tokens < 0:  # admitted for the first time: the turn's figure
                request.num_restored_tokens += len(restored) * bs
            hits.extend(restored)
        self.num_queried_tokens += request.num_tokens
        self.num_hit_tokens += len(hits) * self.block_size
        return hits, len(hits) * self.block_size

    def _restore(
        self, request: Request, hits: list[KVCacheBlock], data: memoryview, max_blocks: int
    ) -> list[KVCacheBlock]:
        """Reads the pages that continue `hits` from the tiers into free blocks, until the
        first page no tier holds; returns them cached and unreferenced (like any hit)."""
        assert self.tiers is not None
        pool, step = self.block_pool, self.block_size * 8
        pool.touch(hits)  # so that handing out blocks below never evicts one of them
        restored: list[KVCacheBlock] = []
        hashes = request.block_hashes

        def key_at(i: int) -> PageKey:
            tokens = bytes(data[i * step : (i + 1) * step])
            return PageKey(hashes[i], hashes[i - 1] if i else None, tokens)

        start = len(hits)
        # at most the free blocks but one (kept for the prompt's last token)
        end = min(max_blocks, start + pool.num_free_blocks - 1)
        try:
            for i in range(start, end):
                key = key_at(i)
                if i == start + 1:  # the first page was there: read the others ahead
                    self.tiers.prefetch([key, *(key_at(j) for j in range(i + 1, end))])
                parent, tokens = key.parent_hash, key.token_bytes
                (block,) = pool.get_new_blocks(1)
                try:
                    found = self.tiers.restore(block.block_id, key)
                except BaseException:
                    pool.free_blocks([block])
                    raise
                if not found:
                    pool.free_blocks([block])
                    break
                pool.cache_full_block(block, key.block_hash, parent, tokens)
                restored.append(block)
        finally:
            self.tiers.prefetch(())
            pool.free_blocks(list(reversed(restored)))
            pool.free_blocks(list(reversed(hits)))
        return restored

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        new_computed_blocks: list[KVCacheBlock] | None = None,
    ) -> list[KVCacheBlock] | None:
        """Pages for `num_new_tokens` more tokens (after any prefix hit), or None if full.

        On None nothing changed, so the caller may preempt someone and try again.
        """
        new_computed_blocks = new_computed_blocks or []
        blocks = self.req_to_blocks.setdefault(request.request_id, [])
        num_computed = request.num_computed_tokens + len(new_computed_blocks) * self.block_size
        total = num_computed + num_new_tokens
        num_needed = cdiv(total, self.block_size) - len(blocks) - len(new_computed_blocks)
        # A hit on a block nobody references takes it off the free queue too.
        num_evictable_hits = sum(1 for b in new_computed_blocks if b.ref_cnt == 0)
        if max(num_needed, 0) + num_evictable_hits > self.block_pool.num_free_blocks:
            return None
        self.block_pool.touch(new_computed_blocks)
        blocks.extend(new_computed_blocks)
        self._num_cached_blocks.setdefault(request.request_id, 0)
        self._num_cached_blocks[request.request_id] += len(new_computed_blocks)
        new_blocks = self.block_pool.get_new_blocks(num_needed) if num_needed > 0 else []
        blocks.extend(new_blocks)
        return new_blocks

    def cache_blocks(self, request: Request) -> None:
        """Indexes the request's blocks that its computed tokens have filled."""
        if not self.enable_caching:
            return
        blocks = self.req_to_blocks.get(request.request_id)
        if not blocks:
            return
        num_full = min(request.num_computed_tokens // self.block_size, len(blocks))
        start = self._num_cached_blocks.get(request.request_id, 0)
        if num_full <= start:  # the common decode step: no block filled up
            return
        self._update_hashes(request)
        bs, step = self.block_size, self.block_size * 8
        data = token_bytes(request.token_slice(start * bs, num_full * bs))
        for i in range(start, num_full):
            parent = request.block_hashes[i - 1] if i else None
            j = (i - start) * step
            self.block_pool.cache_full_block(
                blocks[i], request.block_hashes[i], parent, data[j : j + step]
            )
            if self.tiers is not None:
                key = PageKey(request.block_hashes[i], parent, bytes(data[j : j + step]))
                self.tiers.save(blocks[i].block_id, key)
        self._num_cached_blocks[request.request_id] = max(start, num_full)

    def free(self, request: Request) -> None:
        blocks = self.req_to_blocks.pop(request.request_id, [])
        self._block_ids.pop(request.request_id, None)
        self._num_cached_blocks.pop(request.request_id, None)
        self.block_pool.free_blocks(list(reversed(blocks)))

    def get_block_ids(self, request_id: str) -> tuple[int, ...]:
        blocks = self.req_to_blocks.get(request_id, ())
        ids = self._block_ids.get(request_id, ())
        if len(ids) != len(blocks):  # blocks were appended since (lists only grow until freed)
            ids = ids + tuple(b.block_id for b in blocks[len(ids) :])
            self._block_ids[request_id] = ids
        return ids

    def reset_prefix_cache(self) -> bool:
        return self.block_pool.reset_prefix_cache()
