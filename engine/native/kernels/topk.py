"""Row-wise top-k of block scores in one Triton launch (replaces torch.topk, whose radix
select costs ~50 us for a handful of 8192-wide decode rows and ~10% of prefill scoring).

Short rows: one program per row keeps the row in registers and extracts the k largest by k
max-with-index passes. Long rows (> 1024 blocks): one-warp programs do the same per 512-wide
chunk, a second kernel merges the chunk winners. -inf entries (blocks the query cannot see)
come out as -1.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import next_pow2


@triton.jit
def _topk_chunk_kernel(
    score_ptr,
    cand_v_ptr,
    cand_i_ptr,
    nb,
    stride_row,
    K: tl.constexpr,
    KP: tl.constexpr,
    CH: tl.constexpr,
):
    """Stage 1 for few, long rows (decode): the top K of one CH-wide chunk of one row."""
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    nchunks = tl.num_programs(1)
    b = c * CH + tl.arange(0, CH)
    x = tl.load(score_ptr + row * stride_row + b, mask=b < nb, other=float("-inf"))
    kk = tl.arange(0, KP)
    vals = tl.full((KP,), float("-inf"), tl.float32)
    idx = tl.full((KP,), -1, tl.int32)
    for i in tl.static_range(K):
        m, j = tl.max(x, axis=0, return_indices=True)
        vals = tl.where(kk == i, m, vals)
        idx = tl.where(kk == i, c * CH + j, idx)
        x = tl.where(tl.arange(0, CH) == j, float("-inf"), x)
    out = (row * nchunks + c) * KP + kk
    tl.store(cand_v_ptr + out, vals)
    tl.store(cand_i_ptr + out, idx)


@triton.jit
def _topk_merge_kernel(
    cand_v_ptr,
    cand_i_ptr,
    out_ptr,
    stride_out,
    ncand,
    K: tl.constexpr,
    KP: tl.constexpr,
    NC_P: tl.constexpr,
):
    # ncand (chunks x KP) is a runtime value: as a constant it compiled the kernel again for
    # every 512 blocks of context (65,536 tokens), a ~0.5 s stall each in a long prefill
    row = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, NC_P)
    ok = j < ncand
    x = tl.load(cand_v_ptr + row * ncand + j, mask=ok, other=float("-inf"))
    ids = tl.load(cand_i_ptr + row * ncand + j, mask=ok, other=-1)
    kk = tl.arange(0, KP)
    res = tl.full((KP,), -1, tl.int32)
    for i in tl.static_range(K):
        m, a = tl.max(x, axis=0, return_indices=True)
        pick = tl.sum(tl.where(j == a, ids, 0), axis=0)
        res = tl.where(kk == i, tl.where(m > float("-inf"), pick, -1), res)
        x = tl.where(j == a, float("-inf"), x)
    tl.store(out_ptr + row * stride_out + kk, res, mask=kk < K)


@triton.jit
def _topk_rows_kernel(
    score_ptr,
    out_ptr,
    nb,
    stride_row,
    stride_out,
    K: tl.constexpr,
    KP: tl.constexpr,
    NB_P: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    b = tl.arange(0, NB_P)
    x = tl.load(score_ptr + row * stride_row + b, mask=b < nb, other=float("-inf"))
    kk = tl.arange(0, KP)
    res = tl.full((KP,), -1, tl.int32)
    for i in tl.static_range(K):
        m, j = tl.max(x, axis=0, return_indices=True)
        res = tl.where(kk == i, tl.where(m > float("-inf"), j, -1), res)
        x = tl.where(b == j, float("-inf"), x)
    tl.store(out_ptr + row * stride_out + kk, res, mask=kk < K)


def topk_blocks(scores: torch.Tensor, topk: int) -> torch.Tensor:
    """scores [..., NB] fp32 -> [..., topk] int32 block ids, best first, -1 where the row has
    fewer than topk finite scores."""
    lead = scores.shape[:-1]
    nb = scores.shape[-1]
    rows = scores.reshape(-1, nb)
    out = torch.empty((rows.shape[0], topk), dtype=torch.int32, device=scores.device)
    if rows.shape[0] and nb > 1024:
        # long rows: one-warp programs take the top k of each 512-wide chunk in parallel
        # (a pass is warp shuffles only), then one merge of the chunk winners per row
        ch = 512
        nchunks = triton.cdiv(nb, ch)
        kp = next_pow2(topk)
        cv = torch.empty((rows.shape[0], nchunks, kp), dtype=torch.float32, device=scores.device)
        ci = torch.empty((rows.shape[0], nchunks, kp), dtype=torch.int32, device=scores.device)
        _topk_chunk_kernel[(rows.shape[0], nchunks)](
            rows, cv, ci, nb, rows.stride(0), K=topk, KP=kp, CH=ch, num_warps=1
        )
        _topk_merge_kernel[(rows.shape[0],)](
            cv,
            ci,
            out,
            out.stride(0),
            nchunks * kp,
            K=topk,
            KP=kp,
            NC_P=next_pow2(nchunks * kp),
            num_warps=1 if nchunks * kp <= 512 else 4,
        )
    elif rows.shape[0]:
        nbp = next_pow2(max(nb, 16))
        _topk_rows_kernel[(rows.shape[0],)](
            rows,
            out,
            nb,
            rows.stride(0),
            out.stride(0),
            K=topk,
            KP=next_pow2(topk),
            NB_P=nbp,
            num_warps=8 if nbp >= 4096 else 4,
        )
    return out.view(*lead, topk)


def reference(scores: torch.Tensor, topk: int) -> torch.Tensor:
    """torch.topk with topk_blocks' contract: [..., topk] int32 ids, best first, -1 for a slot
    past the row's finite scores (also the path off CUDA)."""
    k = min(topk, scores.shape[-1])
    vals, idx = torch.topk(scores, k, dim=-1)
    idx = torch.where(vals == float("-inf"), -1, idx).to(torch.int32)
    if k < topk:
        pad = torch.full((*scores.shape[:-1], topk - k), -1, dtype=torch.int32, device=idx.device)
        idx = torch.cat([idx, pad], dim=-1)
    return idx
