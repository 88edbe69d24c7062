"""Residual add + Gemma RMSNorm in one pass (SPEC 1.4): one program per token row.

new_residual = x + residual (stored in the residual dtype, as the torch path rounds it), then
y = new_residual * rsqrt(mean(new_residual^2) + eps) * (1 + w) in fp32, stored in x's dtype.
Replaces ~9 torch launches per norm (add, cast, square, mean, rsqrt, two products, casts) and
two round trips of the hidden state through memory.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..layers.norm import add_rmsnorm as torch_add_rmsnorm
from .common import next_pow2


@triton.jit
def _add_rmsnorm_kernel(
    x_ptr,
    r_ptr,
    w_ptr,
    y_ptr,
    ro_ptr,
    n,
    eps,
    sx,
    sr,
    sy,
    sro,
    HAS_RES: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + row * sx + offs, mask=m, other=0.0).to(tl.float32)
    if HAS_RES:
        x += tl.load(r_ptr + row * sr + offs, mask=m, other=0.0).to(tl.float32)
        xr = x.to(ro_ptr.dtype.element_ty)
        tl.store(ro_ptr + row * sro + offs, xr, mask=m)
        x = xr.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n + eps)
    w = tl.load(w_ptr + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * sy + offs, (x * rstd * (1.0 + w)).to(y_ptr.dtype.element_ty), mask=m)


def add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """x, residual [T, H] -> (norm(x + residual), x + residual); residual None: (norm(x), x)."""
    t, n = x.shape
    y = torch.empty_like(x)
    if residual is None:
        ro, r, has = x, x, False
    else:
        ro, r, has = torch.empty_like(residual), residual, True
    if t:
        blk = next_pow2(n)
        _add_rmsnorm_kernel[(t,)](
            x,
            r,
            weight,
            y,
            ro,
            n,
            eps,
            x.stride(0),
            r.stride(0),
            y.stride(0),
            ro.stride(0),
            HAS_RES=has,
            BLOCK=blk,
            num_warps=8 if blk >= 4096 else 4,
        )
    return y, ro


# The torch reference, which is also the CPU path (GemmaRMSNorm.add_forward without it).
reference = torch_add_rmsnorm
