"""Dense causal GQA attention over the paged cache (M3's layers 0-2, and any short context).

A paged flash-attention in Triton: rows are BLOCK_T tokens x the G query heads of one KV
group, so the tensor cores see 64-128-row tiles even at decode's 16; each program walks the
128-token pages of its request (bottom-right causal: query i of a chunk sits at
context + i) with an online softmax. The pages are split over the grid's third axis (split-K)
when there are too few tiles to fill the GPU (decode at long context); the partials are
merged by the same kernel as the sparse path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..core.attention_metadata import BLOCK_SIZE, AttentionMetadata
from ..layers.attention import dense_attention as torch_dense_attention
from .attention_parts import (
    attention_operands,
    causal_page_scores,
    finish_partial,
    load_q_rows,
    online_softmax_step,
    store_partial,
)
from .common import LOG2E, next_pow2, query_tile_plan, tile_rows
from .split_k_merge import _merge


@triton.jit
def _dense_kernel(
    ptrs,
    tiles,
    strides,
    qk_scale,
    blocks_per_split,
    G: tl.constexpr,
    D: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLK: tl.constexpr,
    TILE_IS_REQ: tl.constexpr,
):
    """ptrs, strides: attention_operands; tiles: query_tile_plan's."""
    tile = tl.program_id(0)
    g = tl.program_id(1)
    split = tl.program_id(2)
    M: tl.constexpr = BLOCK_T * G
    req, tok, hh, ok, pos = tile_rows(tile, tiles, ptrs[2], M, G, TILE_IS_REQ)
    nvis_max = tl.max(tl.where(ok, pos, 0), axis=0) // BLK + 1
    d = tl.arange(0, D)
    offs = tl.arange(0, BLK)
    q = load_q_rows(ptrs, strides, tok, g, hh, ok, d, G)
    m_i = tl.full((M,), float("-inf"), tl.float32)
    l_i = tl.zeros((M,), tl.float32)
    acc = tl.zeros((M, D), tl.float32)
    b_lo = split * blocks_per_split
    b_hi = tl.minimum(b_lo + blocks_per_split, nvis_max)
    for b in range(b_lo, b_hi):
        s, v = causal_page_scores(q, ptrs, strides, req, b, g, pos, offs, d, qk_scale, D, BLK)
        m_i, l_i, acc = online_softmax_step(s, v, m_i, l_i, acc)
    o, lse = finish_partial(acc, l_i, m_i)
    store_partial(ptrs, strides, tok, g, split, split, hh, d, o, lse, ok)


def dense_attention(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    md: AttentionMetadata,
    scale: float,
    splits: int | None = None,
) -> torch.Tensor:
    """q [T, Hq, D] -> [T, Hq, D]; query i of request r sits at context_lens[r] + i."""
    t, hq, d = q.shape
    if t == 0:
        return torch.empty_like(q)
    hkv = kv_cache.shape[1]
    g_size = hq // hkv
    max_q = max(md.query_lens_cpu)
    block_t = max(1, min(next_pow2(max_q), 128 // g_size))
    block_t = max(block_t, max(1, 16 // g_size))
    tile_is_req, tiles, n_tiles = query_tile_plan(md, block_t, q.device)
    nb = md.block_tables.shape[1]
    if splits is None:
        # split the pages when tiles x KV heads cannot fill the GPU (decode at long context)
        splits = 1
        while n_tiles * hkv * splits < 512 and splits < 64 and nb // (splits * 2) >= 8:
            splits *= 2
    bps = triton.cdiv(nb, splits)
    po = torch.empty((t, hkv, splits, g_size, d), dtype=q.dtype, device=q.device)
    plse = torch.empty((t, hkv, splits, g_size), dtype=torch.float32, device=q.device)
    ptrs, strides = attention_operands(q, kv_cache, md, po, plse)
    _dense_kernel[(n_tiles, hkv, splits)](
        ptrs,
        tiles,
        strides,
        scale * LOG2E,
        bps,
        G=g_size,
        D=d,
        BLOCK_T=block_t,
        BLK=BLOCK_SIZE,
        TILE_IS_REQ=tile_is_req,
        num_warps=8 if block_t * g_size >= 128 else 4,
    )
    return _merge(po, plse, torch.empty_like(q), g_size)


# The torch reference, which is also the CPU path (the op table's dense_attention); it returns
# q's dtype, so the kernel tests give it float32 queries for a float32 result.
reference = torch_dense_attention
