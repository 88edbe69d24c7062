"""Sparse decode attention (query length 1..8): split-K over the selected blocks.

One program per (token, KV head, chunk of the selection), the KV group's 16 query heads as
the rows, online softmax over the chunk's blocks; partials merged by split_k_merge.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..attention_metadata import BLOCK_SIZE, AttentionMetadata
from .common import (
    LOG2E,
    next_pow2,
    online_softmax_step,
    token_to_request,
)
from .split_k_merge import _merge


@triton.jit
def _decode_kernel(
    q_ptr,
    kv_ptr,
    topk_ptr,
    pos_ptr,
    req_ptr,
    bt_ptr,
    po_ptr,
    plse_ptr,
    sq_t,
    sq_h,
    skv_page,
    skv_h,
    skv_off,
    stk_t,
    stk_h,
    stride_bt,
    sp_t,
    sp_g,
    sp_c,
    sp_h,
    sl_t,
    sl_g,
    sl_c,
    qk_scale,
    uniform_qlen,
    G: tl.constexpr,
    D: tl.constexpr,
    E: tl.constexpr,
    EP: tl.constexpr,
    BLK: tl.constexpr,
    UNIFORM: tl.constexpr,
    KV_FP8: tl.constexpr,
):
    t = tl.program_id(0)
    g = tl.program_id(1)
    c = tl.program_id(2)
    if UNIFORM:  # decode rows: request r owns tokens [r*qlen, (r+1)*qlen)
        req = (t // uniform_qlen).to(tl.int64)
    else:
        req = tl.load(req_ptr + t).to(tl.int64)
    pos = tl.load(pos_ptr + t).to(tl.int32)
    nvis = pos // BLK + 1
    rows = tl.arange(0, G)
    d = tl.arange(0, D)
    offs = tl.arange(0, BLK)
    q = tl.load(q_ptr + t * sq_t + (g * G + rows)[:, None] * sq_h + d[None, :])
    if KV_FP8:
        # e4m3 widens to fp16 in one instruction (to bf16 it takes several); the normed q
        # and the probabilities are well inside fp16's range
        q = q.to(tl.float16)
    # all of this chunk's block ids and pages in two vector loads, so the unrolled loop
    # below can issue every page's loads without a dependent round trip per block
    ids = tl.arange(0, EP)
    blks = tl.load(topk_ptr + t * stk_t + g * stk_h + c * E + ids, mask=ids < E, other=-1)
    okv = (blks >= 0) & (blks < nvis)
    pages = tl.load(bt_ptr + req * stride_bt + tl.where(okv, blks, 0), mask=okv, other=0)
    m_i = tl.full((G,), float("-inf"), tl.float32)
    l_i = tl.zeros((G,), tl.float32)
    acc = tl.zeros((G, D), tl.float32)
    for i in tl.static_range(E):
        blk = tl.sum(tl.where(ids == i, blks, 0), axis=0)
        page = tl.sum(tl.where(ids == i, pages, 0), axis=0).to(tl.int64)
        valid = (blk >= 0) & (blk < nvis)
        lmask = (tl.zeros((BLK, D), tl.int32) + valid.to(tl.int32)) != 0
        base = kv_ptr + page * skv_page + g * skv_h + offs[:, None] * skv_off + d[None, :]
        k = tl.load(base, mask=lmask, other=0.0).to(q.dtype)
        v = tl.load(base + D, mask=lmask, other=0.0).to(q.dtype)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where(valid & ((blk * BLK + offs)[None, :] <= pos), s, float("-inf"))
        m_i, l_i, acc = online_softmax_step(s, v, m_i, l_i, acc)
    has = l_i > 0
    o = tl.where(has[:, None], acc / tl.where(has, l_i, 1.0)[:, None], 0.0)
    lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    tl.store(
        po_ptr + t * sp_t + g * sp_g + c * sp_c + rows[:, None] * sp_h + d[None, :],
        o.to(po_ptr.dtype.element_ty),
    )
    tl.store(plse_ptr + t * sl_t + g * sl_g + c * sl_c + rows, lse)


def decode_chunks(num_tokens: int, hkv: int, topk: int) -> int:
    """Partials per (token, KV head): enough programs to fill 132 SMs a few times over, and
    at most 4 blocks per program (16 unrolled page loads spill registers: H200 run of
    2026-11-29, fp8 batch 64 q8 went 625 -> 895 us)."""
    c = 1
    while c * 2 <= min(topk, max(1, 1024 // max(1, num_tokens * hkv))) and topk % (c * 2) == 0:
        c *= 2
    while topk // c > 4 and topk % (c * 2) == 0:
        c *= 2
    return c


def sparse_attention_decode(
    q,
    kv_cache,
    topk_idx,
    md: AttentionMetadata,
    scale: float,
    req_idx: torch.Tensor | None = None,
    chunks: int | None = None,
) -> torch.Tensor:
    t, hq, d = q.shape
    hkv, k = topk_idx.shape[1], topk_idx.shape[2]
    g_size = hq // hkv
    c = chunks or decode_chunks(t, hkv, k)
    po = torch.empty((t, hkv, c, g_size, d), dtype=q.dtype, device=q.device)
    plse = torch.empty((t, hkv, c, g_size), dtype=torch.float32, device=q.device)
    dql = md.decode_query_len
    uniform = req_idx is None and md.num_decodes > 0 and t == md.num_decodes * dql
    if uniform:
        req = md.positions  # unused placeholder pointer: the kernel computes t // dql
    else:
        req = token_to_request(md, q.device) if req_idx is None else req_idx
    _decode_kernel[(t, hkv, c)](
        q,
        kv_cache,
        topk_idx,
        md.positions,
        req,
        md.block_tables,
        po,
        plse,
        q.stride(0),
        q.stride(1),
        kv_cache.stride(0),
        kv_cache.stride(1),
        kv_cache.stride(2),
        topk_idx.stride(0),
        topk_idx.stride(1),
        md.block_tables.stride(0),
        *po.stride()[:4],
        *plse.stride()[:3],
        scale * LOG2E,
        dql,
        G=g_size,
        D=d,
        E=k // c,
        EP=next_pow2(k // c),
        BLK=BLOCK_SIZE,
        UNIFORM=uniform,
        KV_FP8=kv_cache.dtype == torch.float8_e4m3fn,
        num_warps=4,
    )
    return _merge(po, plse, torch.empty_like(q), g_size)
