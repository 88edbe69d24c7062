"""Split-K merge: combine per-(token, KV head) partial outputs (query dtype) and their base-2
log-sum-exps (fp32) into the final attention output (SPEC 2.7's merge)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def merge_step(lse_ptrs, po, c, sp_c, sp_h, h, d, mx, tot, acc, CACHE: tl.constexpr):
    """Add partial c (its LSEs [G] at lse_ptrs, its outputs [G, D] at po + c * sp_c) to the
    running weight total and accumulator of a merge whose rows' largest LSE is mx; CACHE: the
    loads' cache modifier."""
    lse = tl.load(lse_ptrs, cache_modifier=CACHE)
    live = lse > float("-inf")
    w = tl.where(live, tl.exp2(lse - mx), 0.0)
    o = tl.load(
        po + c * sp_c + h[:, None] * sp_h + d[None, :],
        mask=live[:, None],
        other=0.0,
        cache_modifier=CACHE,
    ).to(tl.float32)
    return tot + w, acc + w[:, None] * o


@triton.jit
def _merge_kernel(po_ptr, plse_ptr, out_ptr, sp, sl, so, C, G: tl.constexpr, D: tl.constexpr):
    """One program per (token, KV head): the G heads' C partials are one contiguous slab;
    sp, sl, so: the strides of po [T, Hkv, C, G, D], plse [T, Hkv, C, G] and out [T, Hq, D]."""
    sp_t, sp_g, sp_c, sp_h = sp
    sl_t, sl_g, sl_c = sl
    so_t, so_h = so
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
        tot, acc = merge_step(
            lbase + c * sl_c, po_ptr + t * sp_t + g * sp_g, c, sp_c, sp_h, h, d, mx, tot, acc, ""
        )
    res = acc / tl.where(tot > 0, tot, 1.0)[:, None]
    tl.store(
        out_ptr + t * so_t + (g * G + h)[:, None] * so_h + d[None, :],
        res.to(out_ptr.dtype.element_ty),
    )


def partial_strides(
    po: torch.Tensor, plse: torch.Tensor, out: torch.Tensor
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The (sp, sl, so) stride tuples a merge takes: po [T, Hkv, C, G, D], plse [T, Hkv, C, G]
    and out [T, Hq, D]."""
    return po.stride()[:4], plse.stride()[:3], out.stride()[:2]


def _merge(po: torch.Tensor, plse: torch.Tensor, out: torch.Tensor, g_size: int) -> torch.Tensor:
    t, hq, d = out.shape
    _merge_kernel[(t, hq // g_size)](
        po,
        plse,
        out,
        *partial_strides(po, plse, out),
        po.shape[2],
        G=g_size,
        D=d,
        num_warps=4,
    )
    return out
