"""MSA indexer: block scoring (SPEC 2.3) + top-k selection (SPEC 2.4), decode and prefill.

Rows are (token, index head) pairs; every head scores against the ONE shared index-key head,
so a tile of BLOCK_T tokens x H heads is a [BLOCK_T*H, Di] x [Di, 128] product per block.
Tiles never straddle requests (each request has its own block table). The grid's second axis
splits the blocks (split-K over the context), so batch-1 decode at 1M still fills the GPU.
Each program keeps the max of every block of its split in registers and stores them at once;
forced blocks (init / local) are written as 1e30 / 1e29 and invisible blocks as -inf, so the
selection is one top-k over [T*H, num_blocks] fp32 scores, a few hundred KB at decode.
FP8 (e4m3) index caches: the index queries are quantised to e4m3 too (as vLLM's fused op does)
and the product runs on fp8 tensor cores with fp32 accumulation.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..core.attention_metadata import BLOCK_SIZE, AttentionMetadata
from ..layers.msa import index_queries
from ..layers.msa import index_select_blocks as torch_index_select_blocks
from .common import next_pow2, query_tile_plan, tile_rows
from .topk import reference as reference_topk
from .topk import topk_blocks


@triton.jit
def _store_block(
    score_ptr,
    m,
    b,
    tok,
    head,
    row_ok,
    nvis,
    init_blocks,
    local_blocks,
    stride_s_row,
    H: tl.constexpr,
):
    vis = b < nvis
    m = tl.where(vis, m, float("-inf"))
    m = tl.where(vis & (b >= nvis - local_blocks), 1e29, m)
    m = tl.where(vis & (b < init_blocks), 1e30, m)
    tl.store(score_ptr + (tok.to(tl.int64) * H + head) * stride_s_row + b, m, mask=row_ok)


@triton.jit
def _index_score_kernel(
    iq_ptr,
    ik_ptr,
    score_ptr,
    pos_ptr,
    bt_ptr,
    tiles,
    stride_iq_t,
    stride_iq_h,
    stride_ik_page,
    stride_ik_off,
    stride_s_row,
    stride_bt,
    num_blocks,
    init_blocks,
    local_blocks,
    bps,
    H: tl.constexpr,
    DI: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BPS_P: tl.constexpr,
    BLK: tl.constexpr,
    TILE_IS_REQ: tl.constexpr,
):
    """tiles: query_tile_plan's."""
    tile = tl.program_id(0)
    split = tl.program_id(1)
    BLOCK_M: tl.constexpr = BLOCK_T * H
    req, tok, head, row_ok, pos = tile_rows(tile, tiles, pos_ptr, BLOCK_M, H, TILE_IS_REQ)
    nvis = pos // BLK + 1
    nvis_max = tl.max(tl.where(row_ok, nvis, 0), axis=0)
    # blocks below every row's position need no causal mask (all but the last few)
    full_hi = (tl.min(tl.where(row_ok, pos, 2147483647), axis=0) + 1) // BLK
    d = tl.arange(0, DI)
    q = tl.load(
        iq_ptr + tok[:, None].to(tl.int64) * stride_iq_t + head[:, None] * stride_iq_h + d[None, :],
        mask=row_ok[:, None],
        other=0.0,
    )
    offs = tl.arange(0, BLK)
    b0 = split * bps
    b_hi = tl.minimum(b0 + bps, nvis_max)
    b_mid = tl.maximum(tl.minimum(b_hi, full_hi), b0)
    for b in range(b0, b_mid):
        page = tl.load(bt_ptr + req * stride_bt + b).to(tl.int64)
        k = tl.load(ik_ptr + page * stride_ik_page + offs[:, None] * stride_ik_off + d[None, :])
        m = tl.max(tl.dot(q, tl.trans(k)), axis=1)
        _store_block(
            score_ptr, m, b, tok, head, row_ok, nvis, init_blocks, local_blocks, stride_s_row, H
        )
    for b in range(b_mid, b_hi):
        page = tl.load(bt_ptr + req * stride_bt + b).to(tl.int64)
        k = tl.load(ik_ptr + page * stride_ik_page + offs[:, None] * stride_ik_off + d[None, :])
        s = tl.dot(q, tl.trans(k))
        s = tl.where((b * BLK + offs)[None, :] <= pos[:, None], s, float("-inf"))
        m = tl.max(s, axis=1)
        _store_block(
            score_ptr, m, b, tok, head, row_ok, nvis, init_blocks, local_blocks, stride_s_row, H
        )
    cols = tl.arange(0, BPS_P)
    blk = b0 + cols
    out = score_ptr + (tok[:, None].to(tl.int64) * H + head[:, None]) * stride_s_row + blk[None, :]
    tl.store(
        out,
        tl.full((BLOCK_M, BPS_P), float("-inf"), tl.float32),
        mask=row_ok[:, None]
        & (blk[None, :] >= b_hi)
        & (cols[None, :] < bps)
        & (blk[None, :] < num_blocks),
    )


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


def index_scores(
    iq: torch.Tensor,
    index_cache: torch.Tensor,
    md: AttentionMetadata,
    init_blocks: int = 0,
    local_blocks: int = 1,
    block_t: int | None = None,
    bps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """[T, H, num_blocks] fp32 block scores with the forced blocks and -inf masking applied."""
    t, h, di = iq.shape
    nb = md.block_tables.shape[1]
    scores = torch.empty((t, h, nb), dtype=torch.float32, device=iq.device)
    if t == 0:
        return scores
    iq = index_queries(iq, index_cache)  # e4m3 queries for an e4m3 cache
    max_q = max(md.query_lens_cpu)
    if block_t is None:
        # decode: all of a request's rows in one tile (>= 16 rows for the tensor cores);
        # prefill: 256-row tiles (64 tokens x 4 heads: 430 vs 364 TFLOP/s for 128 rows on the
        # H200, bench/results run 2), so each index-key page feeds a 256x128x128 product.
        block_t = max(next_pow2(max_q), max(1, 16 // h)) if max_q <= 8 else max(1, 256 // h)
    n_tiles_est = sum(-(-q // block_t) for q in md.query_lens_cpu)
    if bps is None:
        if max_q <= 8:
            # decode is bandwidth-bound: one full wave of ~3 programs per SM (2 pipeline
            # stages of 32 KB pages each), so no partial last wave leaves the HBM idle
            target = 3 * _num_sms(iq.device)
            bps = max(1, min(64, triton.cdiv(nb * n_tiles_est, target)))
        else:
            bps = 64
            while bps > 2 and n_tiles_est * triton.cdiv(nb, bps) < 528:
                bps //= 2
    tile_is_req, tiles, n_tiles = query_tile_plan(md, block_t, iq.device)
    grid = (n_tiles, triton.cdiv(nb, bps))
    _index_score_kernel[grid](
        iq,
        index_cache,
        scores,
        md.positions,
        md.block_tables,
        tiles,
        iq.stride(0),
        iq.stride(1),
        index_cache.stride(0),
        index_cache.stride(1),
        nb,
        md.block_tables.stride(0),
        nb,
        init_blocks,
        local_blocks,
        bps,
        H=h,
        DI=di,
        BLOCK_T=block_t,
        BPS_P=next_pow2(bps),
        BLK=BLOCK_SIZE,
        TILE_IS_REQ=tile_is_req,
        num_warps=4 if block_t * h <= 64 else 8,
        num_stages=num_stages or 2,
    )
    return scores


def select_from_scores(scores: torch.Tensor, topk: int) -> torch.Tensor:
    """Top-k over the block axis: logical block ids, -1 for slots past the visible blocks
    (the Triton row kernel on CUDA, torch.topk elsewhere)."""
    if scores.is_cuda:
        return topk_blocks(scores, topk)
    return reference_topk(scores, topk)


def index_select_blocks(
    iq: torch.Tensor,
    index_cache: torch.Tensor,
    md: AttentionMetadata,
    topk: int,
    init_blocks: int = 0,
    local_blocks: int = 1,
) -> torch.Tensor:
    """iq [T, H, Di] -> [T, H, topk] int32 logical block ids (forced first, -1 padded)."""
    if init_blocks + local_blocks > topk:
        raise ValueError(
            f"init_blocks + local_blocks ({init_blocks}+{local_blocks}) exceeds topk {topk}"
        )
    return select_from_scores(index_scores(iq, index_cache, md, init_blocks, local_blocks), topk)


# The torch reference, which is also the CPU path (the op table's index_select_blocks); a
# kernel's selection is checked against its keys (msa.index_selection_keys), ties allowed.
reference = torch_index_select_blocks
