"""The pool of KV-cache pages: free list, reference counts, the prefix-cache index.

One block id names one 128-token page in every layer's main K/V cache and in every MSA layer's
index-key cache. Block 0 is a null page that is never handed out, so the zero padding of block
tables can never alias a live page.

Eviction is lazy: a freed block keeps its hash and stays findable until it is reused. Free blocks
sit in a queue ordered by the time they were freed; allocation takes from the front, so the
least recently freed cached block is evicted first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class KVCacheBlock:
    block_id: int
    ref_cnt: int = 0
    # Set once the block is full and cached; kept after it is freed (lazy eviction).
    block_hash: bytes | None = None
    parent_hash: bytes | None = None
    # The block's token ids as int64 bytes: the token check on a hit is one memcmp, and bytes
    # are invisible to the garbage collector (a million tokens of tuples are not).
    token_bytes: bytes = b""


class BlockPool:
    def __init__(self, num_blocks: int, enable_caching: bool = True) -> None:
        if num_blocks < 2:
            raise ValueError(
                f"the KV cache needs at least 2 blocks (1 is reserved), got {num_blocks}"
            )
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
        self.null_block = self.blocks[0]
        self.null_block.ref_cnt = 1  # never freed, never handed out
        # block_id -> block, in the order blocks became free (front = evicted first).
        self._free: OrderedDict[int, KVCacheBlock] = OrderedDict(
            (b.block_id, b) for b in self.blocks[1:]
        )
        self._cached: dict[bytes, KVCacheBlock] = {}
        self.num_evictions = 0
        self.num_collisions = 0

    # ---- queries ------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        """Blocks that can be handed out now, including cached blocks nobody references."""
        return len(self._free)

    @property
    def usage(self) -> float:
        return 1.0 - len(self._free) / (self.num_blocks - 1)

    def free_block_ids(self) -> list[int]:
        return list(self._free)

    def get_cached_block(
        self, block_hash: bytes, parent_hash: bytes | None, token_bytes: bytes | memoryview
    ) -> KVCacheBlock | None:
        """The cached block for this hash, only if its parent and tokens really match."""
        block = self._cached.get(block_hash)
        if block is None:
            return None
        if block.parent_hash != parent_hash or block.token_bytes != token_bytes:
            self.num_collisions += 1  # a hash collision: treat as a miss, never as a hit
            return None
        return block

    # ---- allocation ---------------------------------------------------------------------

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        if num_blocks > len(self._free):
            raise ValueError(f"cannot get {num_blocks} blocks, only {len(self._free)} free")
        out = []
        for _ in range(num_blocks):
            _, block = self._free.popitem(last=False)
            self._evict(block)
            block.ref_cnt = 1
            out.append(block)
        return out

    def touch(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Takes a reference to blocks found by a prefix hit (they may be sitting free)."""
        for block in blocks:
            if block.ref_cnt == 0:
                del self._free[block.block_id]
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Sequence[KVCacheBlock]) -> None:
        """Drops one reference from each block; blocks reaching 0 join the back of the queue.

        Callers pass a request's blocks tail first, so that the deeper (less shareable) blocks
        of a prefix are evicted before its head.
        """
        for block in ordered_blocks:
            if block.ref_cnt <= 0 or block is self.null_block:
                raise ValueError(f"block {block.block_id} freed more often than referenced")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self._free[block.block_id] = block

    def cache_full_block(
        self,
        block: KVCacheBlock,
        block_hash: bytes,
        parent_hash: bytes | None,
        token_bytes: bytes | memoryview,
    ) -> None:
        """Indexes a block that just became full. First writer wins for a duplicate hash."""
        if not self.enable_caching or block.block_hash is not None:
            return
        block.block_hash = block_hash
        block.parent_hash = parent_hash
        block.token_bytes = bytes(token_bytes)
        self._cached.setdefault(block_hash, block)

    def reset_prefix_cache(self) -> bool:
        """Forgets every cached hash; refused (False) while any block is in use."""
        if len(self._free) != self.num_blocks - 1:
            return False
        for block in self.blocks[1:]:
            self._evict(block)
        return True

    def _evict(self, block: KVCacheBlock) -> None:
        if block.block_hash is None:
            return
        if self._cached.get(block.block_hash) is block:
            del self._cached[block.block_hash]
            self.num_evictions += 1
        block.block_hash = None
        block.parent_hash = None
        block.token_bytes = b""
