"""Grouped-expert MoE (SPEC 1.6): sorted-token dispatch and two grouped GEMMs, no host sync.

The T x k (token, expert) pairs are sorted by expert on the GPU and each expert's run is
padded to BLOCK_M rows (`align`); one program then computes a BLOCK_M x BLOCK_N tile of one
expert's product, reading that expert's weight tile once for all of its rows:
  gate_up[p] = x[p // k] @ w13[e_p]^T           [P, 2I]  (gates | ups, vLLM's merged layout)
  act[p]     = swiglu_oai(gate_up[p])           [P, I]   (kernels/swiglu.py)
  y[p]       = w_p * act[p] @ w2[e_p]^T         [P, H]   fp32, then summed over each token's k
Every shape is a function of T alone (the grid is sized for the worst case, cdiv(P, BM) +
min(E, P) row blocks, and the empty ones exit), so a decode step with this MoE fits in a
CUDA graph.

Weights [E, N, K] (a Linear's [out, in] per expert), in one of three formats:
  "bf16"   bf16 / fp16 weights;
  "fp8"    e4m3 weights with fp32 scale_inv per 128x128 block [E, ceil(N/128), ceil(K/128)]
           (the released FP8 checkpoints' layout), kept as FP8 and widened in registers;
  "mxfp8"  e4m3 weights with one e8m0 exponent byte per 1x32 block along K [E, N, K/32]
           (ModelOpt MXFP8): w = e4m3 * 2^(s - 127).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..layers.moe import routed_sum
from .swiglu import swiglu_oai_merged

FORMATS = ("bf16", "fp8", "mxfp8")
_FMT = {f: i for i, f in enumerate(FORMATS)}


@triton.jit
def _grouped_gemm_kernel(
    a_ptr,
    w_ptr,
    scale_ptr,
    out_ptr,
    sorted_ptr,
    block_expert_ptr,
    route_ptr,
    num_pairs,
    N,
    K,
    top_k,
    s_a,
    s_we,
    s_wn,
    s_se,
    s_sn,
    s_sk,
    s_o,
    A_BY_TOKEN: tl.constexpr,
    MUL_ROUTE: tl.constexpr,
    WFMT: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    e = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    if e >= 0:
        rows = pid_m * BM + tl.arange(0, BM)
        pair = tl.load(sorted_ptr + rows)
        valid = pair < num_pairs
        if A_BY_TOKEN:
            arow = pair // top_k
        else:
            arow = pair
        arow = tl.where(valid, arow, 0).to(tl.int64)
        n = pid_n * BN + tl.arange(0, BN)
        nmask = n < N
        acc = tl.zeros((BM, BN), tl.float32)
        wbase = w_ptr + e * s_we + n[None, :].to(tl.int64) * s_wn
        for k0 in range(0, K, BK):
            kk = k0 + tl.arange(0, BK)
            kmask = kk < K
            a = tl.load(
                a_ptr + arow[:, None] * s_a + kk[None, :],
                mask=valid[:, None] & kmask[None, :],
                other=0.0,
            )
            wmask = nmask[None, :] & kmask[:, None]
            w = tl.load(wbase + kk[:, None], mask=wmask, other=0.0)  # [BK, BN]
            if WFMT == 0:
                acc += tl.dot(a, w.to(a.dtype))
            elif WFMT == 1:  # one scale per 128x128 block: constant over this k tile
                s = tl.load(
                    scale_ptr + e * s_se + (n // 128) * s_sn + (k0 // 128) * s_sk,
                    mask=nmask,
                    other=0.0,
                )
                acc += tl.dot(a, w.to(a.dtype)) * s[None, :]
            else:  # e8m0 exponent per 32 k-values of each row
                sc = tl.load(
                    scale_ptr + e * s_se + n[None, :] * s_sn + (kk[:, None] // 32),
                    mask=wmask,
                    other=127,
                )
                wf = w.to(tl.float32) * tl.exp2(sc.to(tl.float32) - 127.0)
                acc += tl.dot(a, wf.to(a.dtype))
        if MUL_ROUTE:
            acc = acc * tl.load(route_ptr + pair, mask=valid, other=0.0)[:, None]
        tl.store(
            out_ptr + pair[:, None].to(tl.int64) * s_o + n[None, :],
            acc.to(out_ptr.dtype.element_ty),
            mask=valid[:, None] & nmask[None, :],
        )


def align(
    topk_ids: torch.Tensor, num_experts: int, block_m: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sorted pair ids [max_blocks * BM], padded with P; expert per row block [max_blocks],
    -1 for unused blocks). Device ops only, shapes fixed by T."""
    p = topk_ids.numel()
    dev = topk_ids.device
    flat = topk_ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(num_experts, dtype=torch.int64, device=dev)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    pad_end = torch.cumsum(padded, 0)
    sorted_e = flat[order]
    rank = torch.arange(p, device=dev) - (torch.cumsum(counts, 0) - counts)[sorted_e]
    dest = (pad_end - padded)[sorted_e] + rank
    max_blocks = triton.cdiv(p, block_m) + min(num_experts, p)
    sorted_ids = torch.full((max_blocks * block_m,), p, dtype=torch.int32, device=dev)
    sorted_ids.scatter_(0, dest, order.to(torch.int32))
    starts = torch.arange(max_blocks, device=dev) * block_m
    block_expert = torch.searchsorted(pad_end, starts, right=True)
    block_expert = torch.where(starts < pad_end[-1], block_expert, -1).to(torch.int32)
    return sorted_ids, block_expert


def _tiles(p: int, n: int) -> tuple[int, int, int, int, int]:
    """(BM, BN, BK, warps, stages): decode's few rows per expert take 16-row tiles and narrow
    N tiles (many programs streaming weights); prefill 64-row tiles."""
    if p <= 8:  # T <= 2 at top-4: 32-column tiles, 2 warps (H200 sweep, T=1: 187 -> 172 us)
        return 16, 32, 128, 2, 4
    if p <= 256:
        return 16, 64, 128, 4, 4
    return 64, 128, 64, 8, 3


def grouped_gemm(
    a: torch.Tensor,
    w: torch.Tensor,
    scale: torch.Tensor | None,
    fmt: str,
    sorted_ids: torch.Tensor,
    block_expert: torch.Tensor,
    num_pairs: int,
    top_k: int,
    by_token: bool,
    route_w: torch.Tensor | None,
    out_dtype: torch.dtype,
    tiles: tuple[int, int, int, int, int],
) -> torch.Tensor:
    e, n, k = w.shape
    bm, bn, bk, warps, stages = tiles
    out = torch.empty((num_pairs, n), dtype=out_dtype, device=a.device)
    if num_pairs == 0:
        return out
    sc = scale if scale is not None else w
    s_se, s_sn, s_sk = scale.stride() if scale is not None else (0, 0, 0)
    grid = (block_expert.shape[0], triton.cdiv(n, bn))
    _grouped_gemm_kernel[grid](
        a,
        w,
        sc,
        out,
        sorted_ids,
        block_expert,
        route_w if route_w is not None else a,
        num_pairs,
        n,
        k,
        top_k,
        a.stride(0),
        w.stride(0),
        w.stride(1),
        s_se,
        s_sn,
        s_sk,
        out.stride(0),
        A_BY_TOKEN=by_token,
        MUL_ROUTE=route_w is not None,
        WFMT=_FMT[fmt],
        BM=bm,
        BN=bn,
        BK=bk,
        num_warps=warps,
        num_stages=stages,
    )
    return out


def grouped_moe(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    alpha: float = 1.702,
    limit: float = 7.0,
    beta: float = 1.0,
    fmt: str = "bf16",
    w13_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """x [T, H]; w13 [E, 2I, H]; w2 [E, H, I]; topk [T, k] -> routed output [T, H] fp32
    (the shared expert is the caller's)."""
    if fmt not in _FMT:
        raise ValueError(f"unknown MoE weight format {fmt!r} (one of {', '.join(FORMATS)})")
    t, h = x.shape
    k = topk_ids.shape[1]
    p = t * k
    tiles = _tiles(p, w13.shape[1])
    sorted_ids, block_expert = align(topk_ids, w13.shape[0], tiles[0])
    gate_up = grouped_gemm(
        x, w13, w13_scale, fmt, sorted_ids, block_expert, p, k, True, None, x.dtype, tiles
    )
    act = swiglu_oai_merged(gate_up, alpha, limit, beta)
    y = grouped_gemm(
        act,
        w2,
        w2_scale,
        fmt,
        sorted_ids,
        block_expert,
        p,
        k,
        False,
        topk_weights.reshape(-1).float().contiguous(),
        torch.float32,
        tiles,
    )
    return y.view(t, k, h).sum(1)


def dequantize(w: torch.Tensor, scale: torch.Tensor | None, fmt: str) -> torch.Tensor:
    """fp32 weights of any format (reference and loaders)."""
    if fmt == "bf16":
        return w.float()
    e, n, k = w.shape
    if scale is None:
        raise ValueError(f"{fmt} weights need their scales")
    if fmt == "fp8":
        s = scale.float().repeat_interleave(128, 1)[:, :n].repeat_interleave(128, 2)[:, :, :k]
        return w.float() * s
    s = torch.exp2(scale.float() - 127.0).repeat_interleave(32, 2)[:, :, :k]
    return w.float() * s


def reference(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    alpha: float = 1.702,
    limit: float = 7.0,
    beta: float = 1.0,
    fmt: str = "bf16",
    w13_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """The MoE layer's routed sum (layers/moe.py) over the dequantised weights, in fp32 (the
    activation rounded to x's dtype between the GEMMs, as the kernel path stores it)."""
    from .swiglu import reference as swiglu_ref

    def one(
        w: torch.Tensor, s: torch.Tensor | None, e: int
    ) -> torch.Tensor:  # only the routed experts: M3's 128 in fp32 would be 29 GB
        return dequantize(w[e : e + 1], None if s is None else s[e : e + 1], fmt)[0]

    def expert(e: int, xs: torch.Tensor) -> torch.Tensor:
        gu = (xs.float() @ one(w13, w13_scale, e).T).to(x.dtype)
        return swiglu_ref(gu, alpha, limit, beta).float() @ one(w2, w2_scale, e).T

    return routed_sum(x, topk_ids, topk_weights, expert)
