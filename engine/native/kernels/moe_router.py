"""M3's router after its fp32 GEMM (SPEC 1.6), one launch: sigmoid scores, the correction
bias for selection only, top-k, the unbiased scores of the chosen experts renormalised and
times routed_scaling_factor. One program per token keeps its E scores in registers and takes
the k largest by k max-with-index passes (replaces ~10 torch launches, and torch.topk)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import next_pow2


@triton.jit
def _router_kernel(
    logit_ptr,
    bias_ptr,
    w_ptr,
    id_ptr,
    E,
    s_l,
    scaling,
    K: tl.constexpr,
    KP: tl.constexpr,
    EP: tl.constexpr,
    HAS_BIAS: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    e = tl.arange(0, EP)
    m = e < E
    s = tl.sigmoid(tl.load(logit_ptr + t * s_l + e, mask=m, other=0.0).to(tl.float32))
    choice = s
    if HAS_BIAS:
        choice = s + tl.load(bias_ptr + e, mask=m, other=0.0).to(tl.float32)
    choice = tl.where(m, choice, float("-inf"))
    kk = tl.arange(0, KP)
    ids = tl.zeros((KP,), tl.int32)
    ws = tl.zeros((KP,), tl.float32)
    for i in tl.static_range(K):
        _, j = tl.max(choice, axis=0, return_indices=True)
        ids = tl.where(kk == i, j, ids)
        ws = tl.where(kk == i, tl.sum(tl.where(e == j, s, 0.0), axis=0), ws)
        choice = tl.where(e == j, float("-inf"), choice)
    ws = ws / tl.sum(tl.where(kk < K, ws, 0.0), axis=0) * scaling
    tl.store(w_ptr + t * K + kk, ws, mask=kk < K)
    tl.store(id_ptr + t * K + kk, ids, mask=kk < K)


def route(
    logits: torch.Tensor, bias: torch.Tensor | None, top_k: int, scaling: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 router logits [T, E] -> (weights [T, k] fp32, expert ids [T, k] int32)."""
    t, e = logits.shape
    w = torch.empty((t, top_k), dtype=torch.float32, device=logits.device)
    ids = torch.empty((t, top_k), dtype=torch.int32, device=logits.device)
    if t:
        _router_kernel[(t,)](
            logits,
            bias if bias is not None else logits,
            w,
            ids,
            e,
            logits.stride(0),
            scaling,
            K=top_k,
            KP=next_pow2(top_k),
            EP=next_pow2(e),
            HAS_BIAS=bias is not None,
            num_warps=4,
        )
    return w, ids


def reference(
    logits: torch.Tensor, bias: torch.Tensor | None, top_k: int, scaling: float
) -> tuple[torch.Tensor, torch.Tensor]:
    from ..layers.router import route as torch_route

    w, ids = torch_route(logits, bias, top_k, scaling)
    return w, ids.to(torch.int32)
