"""Sparse GQA attention over the selected blocks (SPEC 2.5), decode and prefill.

Both paths write one partial output (query dtype) + log2-LSE (fp32) per (token, KV head,
partial) and a merge kernel combines them (SPEC 2.7's split-K merge):
- decode (query length 1..8): one program per (token, KV head, chunk of the selection), the
  16 query heads of the group as the rows, online softmax over the chunk's blocks;
- prefill: KV-block-outer. The (token, KV head, slot) -> block lists are inverted into
  per-(KV head, request, block) lists of tokens; one program loads one 128-token K/V page once
  and attends the gathered queries (TT tokens x G heads = 64 or 128 rows) to it, so the
  tensor cores see full tiles instead of 16-row slivers.
FP8 (e4m3) K/V pages are widened to bf16 on load.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from m3agent.engine.native.attention_metadata import BLOCK_SIZE, AttentionMetadata
from m3agent.engine.native.kernels.common import (
    LOG2E,
    gather_request_kv,
    next_pow2,
    token_to_request,
)


@triton.jit
def _decode_kernel(
    q_ptr, kv_ptr, topk_ptr, pos_ptr, req_ptr, bt_ptr, po_ptr, plse_ptr,
    sq_t, sq_h, skv_page, skv_h, skv_off, stk_t, stk_h, stride_bt,
    sp_t, sp_g, sp_c, sp_h, sl_t, sl_g, sl_c,
    qk_scale, uniform_qlen,
    G: tl.constexpr, D: tl.constexpr, E: tl.constexpr, EP: tl.constexpr, BLK: tl.constexpr,
    UNIFORM: tl.constexpr, KV_FP8: tl.constexpr,
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
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    has = l_i > 0
    o = tl.where(has[:, None], acc / tl.where(has, l_i, 1.0)[:, None], 0.0)
    lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    tl.store(po_ptr + t * sp_t + g * sp_g + c * sp_c + rows[:, None] * sp_h + d[None, :],
             o.to(po_ptr.dtype.element_ty))
    tl.store(plse_ptr + t * sl_t + g * sl_g + c * sl_c + rows, lse)


@triton.jit
def _prefill_tile(
    w, q_ptr, kv_ptr, pos_ptr, bt_ptr, po_ptr, plse_ptr,
    w_g_ptr, w_req_ptr, w_blk_ptr, w_start_ptr, w_cnt_ptr, ent_tok_ptr, ent_slot_ptr,
    sq_t, sq_h, skv_page, skv_h, skv_off, stride_bt,
    sp_t, sp_g, sp_c, sp_h, sl_t, sl_g, sl_c, qk_scale,
    G: tl.constexpr, D: tl.constexpr, TT: tl.constexpr, BLK: tl.constexpr,
):
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
    pos = tl.load(pos_ptr + tok, mask=ok, other=0).to(tl.int32)
    d = tl.arange(0, D)
    offs = tl.arange(0, BLK)
    q = tl.load(q_ptr + tok[:, None] * sq_t + (g * G + hh)[:, None] * sq_h + d[None, :],
                mask=ok[:, None], other=0.0)
    page = tl.load(bt_ptr + req * stride_bt + blk).to(tl.int64)
    base = kv_ptr + page * skv_page + g * skv_h + offs[:, None] * skv_off + d[None, :]
    k = tl.load(base).to(q.dtype)
    v = tl.load(base + D).to(q.dtype)
    s = tl.dot(q, tl.trans(k)) * qk_scale
    s = tl.where((blk * BLK + offs)[None, :] <= pos[:, None], s, float("-inf"))
    m = tl.max(s, axis=1)
    m = tl.where(m == float("-inf"), 0.0, m)
    p = tl.exp2(s - m[:, None])
    l_i = tl.sum(p, axis=1)
    o = tl.dot(p.to(v.dtype), v)
    has = l_i > 0
    o = o / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, m + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    tl.store(po_ptr + tok[:, None] * sp_t + g * sp_g + slot[:, None] * sp_c + hh[:, None] * sp_h + d[None, :],
             o.to(po_ptr.dtype.element_ty), mask=ok[:, None])
    tl.store(plse_ptr + tok * sl_t + g * sl_g + slot * sl_c + hh, lse, mask=ok)


@triton.jit
def _prefill_kernel(
    q_ptr, kv_ptr, pos_ptr, bt_ptr, po_ptr, plse_ptr,
    w_g_ptr, w_req_ptr, w_blk_ptr, w_start_ptr, w_cnt_ptr, ent_tok_ptr, ent_slot_ptr,
    sq_t, sq_h, skv_page, skv_h, skv_off, stride_bt,
    sp_t, sp_g, sp_c, sp_h, sl_t, sl_g, sl_c,
    qk_scale, nwork,
    G: tl.constexpr, D: tl.constexpr, TT: tl.constexpr, BLK: tl.constexpr,
    PERSIST: tl.constexpr, NS: tl.constexpr,
):
    # PERSIST: a grid of a few programs per SM walks the tiles, so the software pipeliner
    # can fetch the next tile's pages while this one computes.
    if PERSIST:
        for w in tl.range(tl.program_id(0), nwork, tl.num_programs(0), num_stages=NS):
            _prefill_tile(w, q_ptr, kv_ptr, pos_ptr, bt_ptr, po_ptr, plse_ptr,
                          w_g_ptr, w_req_ptr, w_blk_ptr, w_start_ptr, w_cnt_ptr, ent_tok_ptr,
                          ent_slot_ptr, sq_t, sq_h, skv_page, skv_h, skv_off, stride_bt,
                          sp_t, sp_g, sp_c, sp_h, sl_t, sl_g, sl_c, qk_scale, G, D, TT, BLK)
    else:
        _prefill_tile(tl.program_id(0), q_ptr, kv_ptr, pos_ptr, bt_ptr, po_ptr, plse_ptr,
                      w_g_ptr, w_req_ptr, w_blk_ptr, w_start_ptr, w_cnt_ptr, ent_tok_ptr,
                      ent_slot_ptr, sq_t, sq_h, skv_page, skv_h, skv_off, stride_bt,
                      sp_t, sp_g, sp_c, sp_h, sl_t, sl_g, sl_c, qk_scale, G, D, TT, BLK)


@triton.jit
def _merge_kernel(po_ptr, plse_ptr, out_ptr, sp_t, sp_g, sp_c, sp_h, sl_t, sl_g, sl_c, so_t, so_h,
                  C, G: tl.constexpr, D: tl.constexpr):
    """One program per (token, KV head): the G heads' C partials are one contiguous slab."""
    t = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    h = tl.arange(0, G)
    d = tl.arange(0, D)
    lbase = plse_ptr + t * sl_t + g * sl_g + h
    mx = tl.full((G,), -1e30, tl.float32)
    for c in range(C):
        mx = tl.maximum(mx, tl.load(lbase + c * sl_c))
    tot = tl.zeros((G,), tl.float32)
    acc = tl.zeros((G, D), tl.float32)
    for c in range(C):
        lse = tl.load(lbase + c * sl_c)
        live = lse > float("-inf")
        w = tl.where(live, tl.exp2(lse - mx), 0.0)
        o = tl.load(po_ptr + t * sp_t + g * sp_g + c * sp_c + h[:, None] * sp_h + d[None, :],
                    mask=live[:, None], other=0.0).to(tl.float32)
        tot += w
        acc += w[:, None] * o
    res = acc / tl.where(tot > 0, tot, 1.0)[:, None]
    tl.store(out_ptr + t * so_t + (g * G + h)[:, None] * so_h + d[None, :], res.to(out_ptr.dtype.element_ty))


def _merge(po: torch.Tensor, plse: torch.Tensor, out: torch.Tensor, g_size: int) -> torch.Tensor:
    t, hq, d = out.shape
    _merge_kernel[(t, hq // g_size)](po, plse, out, *po.stride()[:4], *plse.stride()[:3],
                                     out.stride(0), out.stride(1), po.shape[2], G=g_size, D=d,
                                     num_warps=4)
    return out


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


def sparse_attention_decode(q, kv_cache, topk_idx, md: AttentionMetadata, scale: float,
                            req_idx: torch.Tensor | None = None,
                            chunks: int | None = None) -> torch.Tensor:
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
        q, kv_cache, topk_idx, md.positions, req, md.block_tables, po, plse,
        q.stride(0), q.stride(1), kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2),
        topk_idx.stride(0), topk_idx.stride(1), md.block_tables.stride(0),
        *po.stride()[:4], *plse.stride()[:3], scale * LOG2E, dql,
        G=g_size, D=d, E=k // c, EP=next_pow2(k // c), BLK=BLOCK_SIZE, UNIFORM=uniform,
        KV_FP8=kv_cache.dtype == torch.float8_e4m3fn, num_warps=4,
    )
    return _merge(po, plse, torch.empty_like(q), g_size)


def build_block_work(topk_idx: torch.Tensor, md: AttentionMetadata, tokens_per_tile: int,
                     req_idx: torch.Tensor):
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
    i32 = lambda x: x.to(torch.int32).contiguous()  # noqa: E731
    return (i32(w_g), i32(w_req), i32(w_blk), i32(w_start), i32(w_cnt)), (ent_tok, ent_slot)


def prefill_plan(topk_idx: torch.Tensor, md: AttentionMetadata, g_size: int,
                 tokens_per_tile: int | None = None, req_idx: torch.Tensor | None = None):
    """The block-outer work list (host-synchronising: its length sizes the grid)."""
    tt = tokens_per_tile or max(1, 128 // g_size)
    req = token_to_request(md, topk_idx.device) if req_idx is None else req_idx
    return tt, build_block_work(topk_idx, md, tt, req)


def sparse_attention_prefill_planned(q, kv_cache, topk_idx, md: AttentionMetadata, scale: float,
                                     plan, persistent: int = 0, num_warps: int | None = None,
                                     num_stages: int = 2) -> torch.Tensor:
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
        _prefill_kernel[(grid,)](
            q, kv_cache, md.positions, md.block_tables, po, plse, *work, ent_tok, ent_slot,
            q.stride(0), q.stride(1), kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2),
            md.block_tables.stride(0), *po.stride()[:4], *plse.stride()[:3], scale * LOG2E, nwork,
            G=g_size, D=d, TT=tt, BLK=BLOCK_SIZE, PERSIST=bool(persistent), NS=num_stages,
            num_warps=num_warps or (8 if tt * g_size >= 128 else 4),
        )
    return _merge(po, plse, torch.empty_like(q), g_size)


def sparse_attention_prefill(q, kv_cache, topk_idx, md: AttentionMetadata, scale: float,
                             tokens_per_tile: int | None = None,
                             req_idx: torch.Tensor | None = None) -> torch.Tensor:
    g_size = q.shape[1] // topk_idx.shape[1]
    plan = prefill_plan(topk_idx, md, g_size, tokens_per_tile, req_idx)
    return sparse_attention_prefill_planned(q, kv_cache, topk_idx, md, scale, plan)


def sparse_attention(q, kv_cache, topk_idx, md: AttentionMetadata, scale: float) -> torch.Tensor:
    """q [T, Hq, D], topk_idx [T, Hkv, K] logical block ids -> [T, Hq, D]. Decode rows (the
    first num_decodes requests) take the split-K path, the rest the block-outer path."""
    nd = md.num_decodes * md.decode_query_len if md.num_decodes else 0
    if nd == 0 or nd == q.shape[0]:
        fn = sparse_attention_decode if nd else sparse_attention_prefill
        return fn(q, kv_cache, topk_idx, md, scale)
    req = token_to_request(md, q.device)
    out = torch.empty_like(q)
    out[:nd] = sparse_attention_decode(q[:nd], kv_cache, topk_idx[:nd], md, scale, req[:nd])
    out[nd:] = _prefill_tail(q, kv_cache, topk_idx, md, scale, req, nd)
    return out


def _prefill_tail(q, kv_cache, topk_idx, md, scale, req, nd):
    # The block-outer path indexes tokens absolutely; run it on all rows with the decode
    # rows' selections blanked, and keep the prefill rows.
    sel = topk_idx.clone()
    sel[:nd] = -1
    return sparse_attention_prefill(q, kv_cache, sel, md, scale, req_idx=req)[nd:]


def reference(q, kv_cache, topk_idx, md: AttentionMetadata, scale: float) -> torch.Tensor:
    """fp32 maths straight from SPEC 2.5 / 2.8: every query head of group g attends to the keys
    of the blocks index head g selected, causally (j <= pos)."""
    t, hq, d = q.shape
    hkv = topk_idx.shape[1]
    g_size = hq // hkv
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    start = 0
    for r, qlen in enumerate(md.query_lens_cpu):
        seq = md.seq_lens_cpu[r]
        kk, vv = gather_request_kv(kv_cache, md.block_tables[r], seq)  # [L, Hkv, D]
        nblk = (seq + BLOCK_SIZE - 1) // BLOCK_SIZE
        sel = topk_idx[start:start + qlen].long()  # [qlen, Hkv, K]
        chosen = torch.zeros((qlen, hkv, nblk + 1), dtype=torch.bool, device=q.device)
        chosen.scatter_(2, torch.where((sel >= 0) & (sel < nblk), sel, nblk), True)
        keymask = chosen[:, :, :nblk].repeat_interleave(BLOCK_SIZE, dim=2)[:, :, :seq]
        pos = md.positions[start:start + qlen].long()
        keymask &= (torch.arange(seq, device=q.device)[None, :] <= pos[:, None])[:, None, :]
        qq = q[start:start + qlen].float().view(qlen, hkv, g_size, d)
        s = torch.einsum("tgzd,lgd->tgzl", qq, kk) * scale
        s = s.masked_fill(~keymask[:, :, None, :], float("-inf"))
        p = torch.softmax(s, dim=-1)
        out[start:start + qlen] = torch.einsum("tgzl,lgd->tgzd", p, vv).reshape(qlen, hq, d)
        start += qlen
    return out
