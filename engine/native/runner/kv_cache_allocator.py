"""Sizes and allocates the paged cache tensors a model asks for in `cache_specs()`."""

from __future__ import annotations

import torch

from ..core.attention_metadata import BLOCK_SIZE
from ..core.model_api import LayerCache, LayerCacheSpec


def bytes_per_block(specs: list[LayerCacheSpec], dtype: torch.dtype) -> int:
    elem = torch.empty((), dtype=dtype).element_size()
    per_token = sum(s.num_kv_heads * 2 * s.head_dim + s.index_dim for s in specs)
    return per_token * BLOCK_SIZE * elem


def num_blocks_for_budget(
    specs: list[LayerCacheSpec], dtype: torch.dtype, memory_bytes: int
) -> int:
    per_block = bytes_per_block(specs, dtype)
    if per_block <= 0:
        raise ValueError("the model declared no KV cache (cache_specs() is empty)")
    return memory_bytes // per_block


def allocate_caches(
    specs: list[LayerCacheSpec], num_blocks: int, dtype: torch.dtype, device: torch.device
) -> list[LayerCache]:
    # Zeros, not empty: a masked-out slot still meets V with weight 0, and 0 * NaN is NaN.
    caches = []
    for s in specs:
        kv = torch.zeros(
            num_blocks, s.num_kv_heads, BLOCK_SIZE, 2 * s.head_dim, dtype=dtype, device=device
        )
        index = (
            torch.zeros(num_blocks, BLOCK_SIZE, s.index_dim, dtype=dtype, device=device)
            if s.index_dim > 0
            else None
        )
        caches.append(LayerCache(kv=kv, index=index))
    return caches
