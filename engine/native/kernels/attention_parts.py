"""Jitted pieces of the paged attention kernels (dense, sparse prefill, sparse decode), inlined
where they are called, and the launch tuples they read.

attention_operands packs the dense and prefill kernels' pointers and strides as two tuples
(Triton flattens them into the same arguments a flat list would be); the helpers below take
those tuples, so a kernel names only what it does differently.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..core.attention_metadata import AttentionMetadata


@triton.jit
def online_softmax_step(s, v, m_i, l_i, acc):
    """One KV tile of a base-2 online softmax (SPEC 2.5): s [M, N] log2-scaled scores (-inf
    where masked), v [N, D]; returns the updated running max, sum and accumulator. P is cast
    to V's dtype before P.V, as vLLM's kernels do."""
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc


def attention_operands(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    md: AttentionMetadata,
    po: torch.Tensor,
    plse: torch.Tensor,
) -> tuple[tuple[torch.Tensor, ...], tuple[tuple[int, ...] | int, ...]]:
    """(pointers, strides) of the dense and sparse-prefill kernels: q [T, Hq, D], the paged
    KV cache, positions, block tables and the split-K partials po [T, Hkv, C, G, D] and
    plse [T, Hkv, C, G]."""
    ptrs = (q, kv_cache, md.positions, md.block_tables, po, plse)
    strides = (
        q.stride()[:2],
        kv_cache.stride()[:3],
        md.block_tables.stride(0),
        po.stride()[:4],
        plse.stride()[:3],
    )
    return ptrs, strides


@triton.jit
def load_q_rows(ptrs, strides, tok, g, hh, ok, d, G: tl.constexpr):
    """q rows [M, D]: row i is token tok[i]'s query head g * G + hh[i] (0 where not ok)."""
    sq_t, sq_h = strides[0]
    return tl.load(
        ptrs[0] + tok[:, None].to(tl.int64) * sq_t + (g * G + hh)[:, None] * sq_h + d[None, :],
        mask=ok[:, None],
        other=0.0,
    )


@triton.jit
def causal_page_scores(
    q,
    ptrs,
    strides,
    req,
    b,
    g,
    pos,
    offs,
    d,
    qk_scale,
    D: tl.constexpr,
    BLK: tl.constexpr,
):
    """Log2-scaled scores [M, BLK] of q against logical block b of request req (-inf past each
    row's position) and that page's V [BLK, D], both in q's dtype."""
    skv_page, skv_h, skv_off = strides[1]
    page = tl.load(ptrs[3] + req * strides[2] + b).to(tl.int64)
    base = ptrs[1] + page * skv_page + g * skv_h + offs[:, None] * skv_off + d[None, :]
    k = tl.load(base).to(q.dtype)
    v = tl.load(base + D).to(q.dtype)
    s = tl.dot(q, tl.trans(k)) * qk_scale
    s = tl.where((b * BLK + offs)[None, :] <= pos[:, None], s, float("-inf"))
    return s, v


@triton.jit
def finish_partial(acc, l_i, m_i):
    """Normalised partial output and its base-2 log-sum-exp (-inf for rows that saw no key)."""
    has = l_i > 0
    o = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    return o, lse


@triton.jit
def store_partial(ptrs, strides, tok, g, slot_rows, slot, hh, d, o, lse, ok):
    """Store partial `slot` of the rows' (token, KV head g, head hh) outputs o and LSEs lse
    (rows where ok). slot is one scalar for every row (dense: the split) or one per row
    (prefill: the selection slot), then slot_rows is slot[:, None]."""
    po_ptr = ptrs[4]
    sp_t, sp_g, sp_c, sp_h = strides[3]
    sl_t, sl_g, sl_c = strides[4]
    tl.store(
        po_ptr
        + tok[:, None].to(tl.int64) * sp_t
        + g * sp_g
        + slot_rows * sp_c
        + hh[:, None] * sp_h
        + d[None, :],
        o.to(po_ptr.dtype.element_ty),
        mask=ok[:, None],
    )
    tl.store(ptrs[5] + tok.to(tl.int64) * sl_t + g * sl_g + slot * sl_c + hh, lse, mask=ok)
