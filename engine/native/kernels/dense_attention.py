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
from .common import (
    LOG2E,
    gather_request_kv,
    next_pow2,
    online_softmax_step,
    query_tiles,
)
from .split_k_merge import _merge


@triton.jit
def _dense_kernel(
    q_ptr,
    kv_ptr,
    pos_ptr,
    bt_ptr,
    po_ptr,
    plse_ptr,
    tile_req_ptr,
    tile_tok_ptr,
    tile_end_ptr,
    sq_t,
    sq_h,
    skv_page,
    skv_h,
    skv_off,
    stride_bt,
    sp_t,
    sp_g,
    sp_c,
    sp_h,
    sl_t,
    sl_g,
    sl_c,
    qk_scale,
    blocks_per_split,
    G: tl.constexpr,
    D: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLK: tl.constexpr,
    TILE_IS_REQ: tl.constexpr,
):
    tile = tl.program_id(0)
    g = tl.program_id(1)
    split = tl.program_id(2)
    if TILE_IS_REQ:  # every request fits one tile: its rows straight from query_start_loc
        req = tile.to(tl.int64)
        t0 = tl.load(tile_tok_ptr + tile)
        t_end = tl.load(tile_tok_ptr + tile + 1)
    else:
        req = tl.load(tile_req_ptr + tile).to(tl.int64)
        t0 = tl.load(tile_tok_ptr + tile)
        t_end = tl.load(tile_end_ptr + tile)
    M: tl.constexpr = BLOCK_T * G
    rows = tl.arange(0, M)
    tok = t0 + rows // G
    hh = rows % G
    ok = tok < t_end
    pos = tl.load(pos_ptr + tok, mask=ok, other=0).to(tl.int32)
    nvis_max = tl.max(tl.where(ok, pos, 0), axis=0) // BLK + 1
    d = tl.arange(0, D)
    offs = tl.arange(0, BLK)
    q = tl.load(
        q_ptr + tok[:, None].to(tl.int64) * sq_t + (g * G + hh)[:, None] * sq_h + d[None, :],
        mask=ok[:, None],
        other=0.0,
    )
    m_i = tl.full((M,), float("-inf"), tl.float32)
    l_i = tl.zeros((M,), tl.float32)
    acc = tl.zeros((M, D), tl.float32)
    b_lo = split * blocks_per_split
    b_hi = tl.minimum(b_lo + blocks_per_split, nvis_max)
    for b in range(b_lo, b_hi):
        page = tl.load(bt_ptr + req * stride_bt + b).to(tl.int64)
        base = kv_ptr + page * skv_page + g * skv_h + offs[:, None] * skv_off + d[None, :]
        k = tl.load(base).to(q.dtype)
        v = tl.load(base + D).to(q.dtype)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where((b * BLK + offs)[None, :] <= pos[:, None], s, float("-inf"))
        m_i, l_i, acc = online_softmax_step(s, v, m_i, l_i, acc)
    has = l_i > 0
    o = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    tl.store(
        po_ptr
        + tok[:, None].to(tl.int64) * sp_t
        + g * sp_g
        + split * sp_c
        + hh[:, None] * sp_h
        + d[None, :],
        o.to(po_ptr.dtype.element_ty),
        mask=ok[:, None],
    )
    tl.store(plse_ptr + tok.to(tl.int64) * sl_t + g * sl_g + split * sl_c + hh, lse, mask=ok)


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
    tile_is_req = max_q <= block_t
    if tile_is_req:  # decode: no host->device copy, so a CUDA graph can capture the step
        qsl = md.query_start_loc
        tile_req, tile_tok, tile_end = qsl, qsl, qsl
        n_tiles = md.num_reqs
    else:
        tile_req, tile_tok, tile_end = query_tiles(md, block_t, q.device)
        n_tiles = tile_req.shape[0]
    nb = md.block_tables.shape[1]
    if splits is None:
        # split the pages when tiles x KV heads cannot fill the GPU (decode at long context)
        splits = 1
        while n_tiles * hkv * splits < 512 and splits < 64 and nb // (splits * 2) >= 8:
            splits *= 2
    bps = triton.cdiv(nb, splits)
    po = torch.empty((t, hkv, splits, g_size, d), dtype=q.dtype, device=q.device)
    plse = torch.empty((t, hkv, splits, g_size), dtype=torch.float32, device=q.device)
    _dense_kernel[(n_tiles, hkv, splits)](
        q,
        kv_cache,
        md.positions,
        md.block_tables,
        po,
        plse,
        tile_req,
        tile_tok,
        tile_end,
        q.stride(0),
        q.stride(1),
        kv_cache.stride(0),
        kv_cache.stride(1),
        kv_cache.stride(2),
        md.block_tables.stride(0),
        *po.stride()[:4],
        *plse.stride()[:3],
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


def reference(
    q: torch.Tensor, kv_cache: torch.Tensor, md: AttentionMetadata, scale: float
) -> torch.Tensor:
    """fp32, explicit softmax over keys j <= position."""
    t, hq, d = q.shape
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    start = 0
    for r, qlen in enumerate(md.query_lens_cpu):
        seq = md.seq_lens_cpu[r]
        k, v = gather_request_kv(kv_cache, md.block_tables[r], seq)  # [L, Hkv, D]
        g = hq // k.shape[1]
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        pos = md.positions[start : start + qlen].long()
        s = torch.einsum("thd,lhd->thl", q[start : start + qlen].float(), k) * scale
        s = s.masked_fill(
            torch.arange(seq, device=q.device)[None, None, :] > pos[:, None, None], float("-inf")
        )
        out[start : start + qlen] = torch.einsum("thl,lhd->thd", torch.softmax(s, -1), v)
        start += qlen
    return out
