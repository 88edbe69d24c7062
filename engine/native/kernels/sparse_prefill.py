"""Sparse prefill attention, KV-block-outer: the (token, KV head, slot) -> block selections are
inverted into per-(KV head, request, block) token lists; one program loads one 128-token
K/V page once and attends the gathered queries (TT tokens x G heads) to it; the per-slot
partials are merged by split_k_merge.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..core.attention_metadata import BLOCK_SIZE, AttentionMetadata
from .attention_parts import (
    attention_operands,
    causal_page_scores,
    finish_partial,
    load_q_rows,
    store_partial,
)
from .common import LOG2E, next_pow2, token_to_request
from .split_k_merge import _merge

# build_block_work's result: per work tile (KV head, request, block, first entry, entries),
# and per sorted entry (token, selection slot); all int32
BlockWork = tuple[
    tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    tuple[torch.Tensor, torch.Tensor],
]
PrefillPlan = tuple[int, BlockWork]  # (tokens per tile, the work)


@triton.jit
def _prefill_tile(
    w,
    ptrs,
    work,
    ent,
    strides,
    qk_scale,
    G: tl.constexpr,
    D: tl.constexpr,
    TT: tl.constexpr,
    BLK: tl.constexpr,
):
    """Work tile w: ptrs, strides from attention_operands; work, ent from build_block_work."""
    w_g_ptr, w_req_ptr, w_blk_ptr, w_start_ptr, w_cnt_ptr = work
    ent_tok_ptr, ent_slot_ptr = ent
    g = tl.load(w_g_ptr + w).to(tl.int64)
    req = tl.load(w_req_ptr + w).to(tl.int64)
    blk = tl.load(w_blk_ptr + w)
    start = tl.load(w_start_ptr + w)
    cnt = tl.load(w_cnt_ptr + w)
    M: tl.constexpr = TT * G
    rows = tl.arange(0, M)
    e = rows // G
    hh = rows % G
    ok = e < cnt
    tok = tl.load(ent_tok_ptr + start + e, mask=ok, other=0).to(tl.int64)
    slot = tl.load(ent_slot_ptr + start + e, mask=ok, other=0).to(tl.int64)
    pos = tl.load(ptrs[2] + tok, mask=ok, other=0).to(tl.int32)
    d = tl.arange(0, D)
    offs = tl.arange(0, BLK)
    q = load_q_rows(ptrs, strides, tok, g, hh, ok, d, G)
    s, v = causal_page_scores(q, ptrs, strides, req, blk, g, pos, offs, d, qk_scale, D, BLK)
    m = tl.max(s, axis=1)
    m = tl.where(m == float("-inf"), 0.0, m)
    p = tl.exp2(s - m[:, None])
    l_i = tl.sum(p, axis=1)
    o, lse = finish_partial(tl.dot(p.to(v.dtype), v), l_i, m)
    store_partial(ptrs, strides, tok, g, slot[:, None], slot, hh, d, o, lse, ok)


@triton.jit
def _prefill_kernel(
    ptrs,
    work,
    ent,
    strides,
    qk_scale,
    nwork,
    G: tl.constexpr,
    D: tl.constexpr,
    TT: tl.constexpr,
    BLK: tl.constexpr,
    PERSIST: tl.constexpr,
    NS: tl.constexpr,
):
    # PERSIST: a grid of a few programs per SM walks the tiles, so the software pipeliner
    # can fetch the next tile's pages while this one computes.
    if PERSIST:
        for w in tl.range(tl.program_id(0), nwork, tl.num_programs(0), num_stages=NS):
            _prefill_tile(w, ptrs, work, ent, strides, qk_scale, G, D, TT, BLK)
    else:
        _prefill_tile(tl.program_id(0), ptrs, work, ent, strides, qk_scale, G, D, TT, BLK)


def build_block_work(
    topk_idx: torch.Tensor, md: AttentionMetadata, tokens_per_tile: int, req_idx: torch.Tensor
) -> BlockWork:
    """Invert token->block selections into per-(KV head, request, block) token lists, cut into
    tiles of tokens_per_tile tokens. Returns the work arrays and the sorted entries."""
    t, hkv, k = topk_idx.shape
    dev = topk_idx.device
    nbmax = md.block_tables.shape[1]
    nreq = md.num_reqs
    blk = topk_idx.long()
    nvis = (md.positions.long() // BLOCK_SIZE + 1)[:, None, None]
    valid = (blk >= 0) & (blk < nvis)
    g = torch.arange(hkv, device=dev)[None, :, None]
    key = (g * nreq + req_idx.long()[:, None, None]) * nbmax + blk
    key = torch.where(valid, key, torch.iinfo(torch.int64).max).flatten()
    skey, order = torch.sort(key, stable=True)
    n = int(valid.sum())
    skey, order = skey[:n], order[:n]
    ent_tok = (order // (hkv * k)).to(torch.int32)
    ent_slot = (order % k).to(torch.int32)
    first = torch.ones(n, dtype=torch.bool, device=dev)
    first[1:] = skey[1:] != skey[:-1]
    gid = torch.cumsum(first, 0) - 1
    gstart = torch.nonzero(first).flatten()
    gend = torch.cat([gstart[1:], torch.tensor([n], device=dev)])
    idx_in = torch.arange(n, device=dev) - gstart[gid]
    w_start = torch.nonzero(idx_in % tokens_per_tile == 0).flatten()
    w_cnt = torch.minimum(gend[gid[w_start]] - w_start, torch.tensor(tokens_per_tile, device=dev))
    wkey = skey[w_start]
    w_blk = wkey % nbmax
    w_req = (wkey // nbmax) % nreq
    w_g = wkey // (nbmax * nreq)

    def i32(x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.int32).contiguous()

    return (i32(w_g), i32(w_req), i32(w_blk), i32(w_start), i32(w_cnt)), (ent_tok, ent_slot)


def prefill_plan(
    topk_idx: torch.Tensor,
    md: AttentionMetadata,
    g_size: int,
    tokens_per_tile: int | None = None,
    req_idx: torch.Tensor | None = None,
) -> PrefillPlan:
    """The block-outer work list (host-synchronising: its length sizes the grid)."""
    tt = tokens_per_tile or max(1, 128 // g_size)
    req = token_to_request(md, topk_idx.device) if req_idx is None else req_idx
    return tt, build_block_work(topk_idx, md, tt, req)


def sparse_attention_prefill_planned(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    topk_idx: torch.Tensor,
    md: AttentionMetadata,
    scale: float,
    plan: PrefillPlan,
    persistent: int = 0,
    num_warps: int | None = None,
    num_stages: int = 2,
) -> torch.Tensor:
    """persistent > 0: that many programs per SM loop over the tiles (else one per tile)."""
    t, hq, d = q.shape
    hkv, k = topk_idx.shape[1], topk_idx.shape[2]
    g_size = hq // hkv
    tt, (work, (ent_tok, ent_slot)) = plan
    cp = next_pow2(k)
    po = torch.empty((t, hkv, cp, g_size, d), dtype=q.dtype, device=q.device)
    plse = torch.full((t, hkv, cp, g_size), float("-inf"), dtype=torch.float32, device=q.device)
    nwork = work[0].shape[0]
    if nwork:
        grid = nwork
        if tt * g_size >= 128:
            num_stages = min(num_stages, 2)  # 3 stages of 128-row tiles exceed shared memory
        if persistent:
            sms = torch.cuda.get_device_properties(q.device).multi_processor_count
            grid = min(nwork, persistent * sms)
        ptrs, strides = attention_operands(q, kv_cache, md, po, plse)
        _prefill_kernel[(grid,)](
            ptrs,
            work,
            (ent_tok, ent_slot),
            strides,
            scale * LOG2E,
            nwork,
            G=g_size,
            D=d,
            TT=tt,
            BLK=BLOCK_SIZE,
            PERSIST=bool(persistent),
            NS=num_stages,
            num_warps=num_warps or (8 if tt * g_size >= 128 else 4),
        )
    return _merge(po, plse, torch.empty_like(q), g_size)


def sparse_attention_prefill(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    topk_idx: torch.Tensor,
    md: AttentionMetadata,
    scale: float,
    tokens_per_tile: int | None = None,
    req_idx: torch.Tensor | None = None,
) -> torch.Tensor:
    g_size = q.shape[1] // topk_idx.shape[1]
    plan = prefill_plan(topk_idx, md, g_size, tokens_per_tile, req_idx)
    return sparse_attention_prefill_planned(q, kv_cache, topk_idx, md, scale, plan)
