"""Split-K merge: combine per-(token, KV head) partial outputs (query dtype) and their base-2
log-sum-exps (fp32) into the final attention output (SPEC 2.7's merge)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _merge_kernel(
    po_ptr,
    plse_ptr,
    out_ptr,
    sp_t,
    sp_g,
    sp_c,
    sp_h,
    sl_t,
    sl_g,
    sl_c,
    so_t,
    so_h,
    C,
    G: tl.constexpr,
    D: tl.constexpr,
):
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
        o = tl.load(
            po_ptr + t * sp_t + g * sp_g + c * sp_c + h[:, None] * sp_h + d[None, :],
            mask=live[:, None],
            other=0.0,
        ).to(tl.float32)
        tot += w
        acc += w[:, None] * o
    res = acc / tl.where(tot > 0, tot, 1.0)[:, None]
    tl.store(
        out_ptr + t * so_t + (g * G + h)[:, None] * so_h + d[None, :],
        res.to(out_ptr.dtype.element_ty),
    )


def _merge(po: torch.Tensor, plse: torch.Tensor, out: torch.Tensor, g_size: int) -> torch.Tensor:
    t, hq, d = out.shape
    _merge_kernel[(t, hq // g_size)](
        po,
        plse,
        out,
        *po.stride()[:4],
        *plse.stride()[:3],
        out.stride(0),
        out.stride(1),
        po.shape[2],
        G=g_size,
        D=d,
        num_warps=4,
    )
    return out
