"""Chained block hashes: hash(parent hash, the block's token ids, extra keys).

A block's hash names its whole prefix, so a lookup walks a prompt block by block and stops at
the first miss. Hashes are only a fast index: every hit is confirmed against the stored tokens.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Sequence

# token ids come as a sequence of ints or as their int64 bytes (what the KV cache manager
# passes, so that a long prompt is converted once rather than block by block).
TokenIds = Sequence[int] | bytes | memoryview
BlockHashFn = Callable[[bytes | None, TokenIds, tuple[object, ...]], bytes]


def token_bytes(token_ids: Sequence[int]) -> memoryview:
    return memoryview(array("q", token_ids)).cast("B")


def hash_block_tokens(
    parent_hash: bytes | None, token_ids: TokenIds, extra_keys: tuple[object, ...] = ()
) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    h.update(parent_hash or b"\x00" * 16)
    h.update(token_ids if isinstance(token_ids, bytes | memoryview) else token_bytes(token_ids))
    for key in extra_keys:  # e.g. media content hashes: same placeholder ids, different image
        h.update(repr(key).encode())
    return h.digest()


def extend_block_hashes(
    block_hashes: list[bytes],
    token_ids: Sequence[int],
    block_size: int,
    hash_fn: BlockHashFn = hash_block_tokens,
    extra_keys: tuple[object, ...] = (),
) -> None:
    """Appends hashes for every full block of `token_ids` not hashed yet (in place)."""
    num_full = len(token_ids) // block_size
    for i in range(len(block_hashes), num_full):
        parent = block_hashes[i - 1] if i else None
        block_tokens = token_ids[i * block_size : (i + 1) * block_size]
        block_hashes.append(hash_fn(parent, block_tokens, extra_keys))
