"""Sparse decode attention (query length 1..8): split-K over the selected blocks.

One program per (token, KV head, chunk of the selection), the KV group's 16 query heads as
the rows, online softmax over the chunk's blocks. The partials are merged either by a second
kernel (split_k_merge) or, with `fused_merge`, by whichever program of a (token, KV head)
finishes last: each program bumps an arrival counter after its partial is written, and the one
that sees C - 1 arrivals merges the C partials (read from L2) and resets the counter, so the
counters stay zero between calls and inside CUDA-graph replays. At batch 1 that saves the
merge kernel's launch and the gap before it, most of the op's time.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..core.attention_metadata import BLOCK_SIZE, AttentionMetadata
from .attention_parts import online_softmax_step
from .common import LOG2E, next_pow2, token_to_request
from .split_k_merge import _merge, merge_step, partial_strides


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
    out_ptr,
    cnt_ptr,
    sq,
    skv,
    stk,
    stride_bt,
    sp,
    sl,
    so,
    qk_scale,
    uniform_qlen,
    C: tl.constexpr,
    G: tl.constexpr,
    D: tl.constexpr,
    E: tl.constexpr,
    EP: tl.constexpr,
    BLK: tl.constexpr,
    UNIFORM: tl.constexpr,
    KV_FP8: tl.constexpr,
    FUSED_MERGE: tl.constexpr,
):
    """sq, skv, stk, sp, sl, so: the strides of q, the KV cache, topk_idx, po, plse, out."""
    sq_t, sq_h = sq
    skv_page, skv_h, skv_off = skv
    stk_t, stk_h = stk
    sp_t, sp_g, sp_c, sp_h = sp
    sl_t, sl_g, sl_c = sl
    so_t, so_h = so
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
    if FUSED_MERGE:
        # every thread's partial stores are issued before the one release-acquire atomic;
        # the last arrival then reads the others' partials through L2 (.cg: not a stale L1)
        tl.debug_barrier()
        arrived = tl.atomic_add(cnt_ptr + t * tl.num_programs(1) + g, 1, sem="acq_rel")
        if arrived == C - 1:
            _merge_group(
                po_ptr + t * sp_t + g * sp_g,
                plse_ptr + t * sl_t + g * sl_g,
                out_ptr + t * so_t + g * G * so_h,
                sp_c,
                sp_h,
                sl_c,
                so_h,
                C,
                G,
                D,
            )
            tl.atomic_xchg(cnt_ptr + t * tl.num_programs(1) + g, 0)


@triton.jit
def _merge_group(
    po, plse, out, sp_c, sp_h, sl_c, so_h, C: tl.constexpr, G: tl.constexpr, D: tl.constexpr
):
    """The C partials of one (token, KV head) -> its G heads' output (SPEC 2.7's merge)."""
    h = tl.arange(0, G)
    d = tl.arange(0, D)
    mx = tl.full((G,), -1e30, tl.float32)
    for c in tl.static_range(C):
        mx = tl.maximum(mx, tl.load(plse + c * sl_c + h, cache_modifier=".cg"))
    tot = tl.zeros((G,), tl.float32)
    acc = tl.zeros((G, D), tl.float32)
    for c in tl.static_range(C):
        tot, acc = merge_step(plse + c * sl_c + h, po, c, sp_c, sp_h, h, d, mx, tot, acc, ".cg")
    res = acc / tl.where(tot > 0, tot, 1.0)[:, None]
    tl.store(out + h[:, None] * so_h + d[None, :], res.to(out.dtype.element_ty))


def decode_chunks(num_tokens: int, hkv: int, topk: int) -> int:
    """Partials per (token, KV head): enough programs to fill 132 SMs a few times over, and
    at most 4 blocks per program (16 unrolled page loads spill registers: H200 run of
    2026-11-29, fp8 batch 64 q8 went 625 -> 895 us). At batch 1 (16 partials) the fused merge
    takes the op from 11.6 to 7.8 us (H200, 2026-12-01); batch 8 was faster still with 8
    partials in isolation (16.4 against 18.1 us) but that was not measured in the stack, so
    the rule stays as it was."""
    c = 1
    while c * 2 <= min(topk, max(1, 1024 // max(1, num_tokens * hkv))) and topk % (c * 2) == 0:
        c *= 2
    while topk // c > 4 and topk % (c * 2) == 0:
        c *= 2
    return c


# Up to this many tokens the last-arrival merge is used. Isolated, it won up to batch 64 x q1
# and lost at batch 64 x q8 (551 against 566 us bf16); in the 60-layer stack it changed batch
# 1 by less than the noise (13.61 against 13.46 ms/step) and batch 32 was 2% slower, so it is
# kept to the small batches where the isolated gain is large (H200, 2026-12-01).
FUSED_MERGE_MAX_TOKENS = 8


class ArrivalCounters:
    """Zeroed int32 arrival counters for the fused merge, one per (token, KV head), kept per
    device and grown on demand. The kernel leaves them zero, so one buffer serves every call
    and every graph replay; it is allocated before capture (the engine warms up first)."""

    def __init__(self) -> None:
        self._bufs: dict[torch.device, torch.Tensor] = {}

    def get(self, n: int, device: torch.device) -> torch.Tensor:
        buf = self._bufs.get(device)
        if buf is None or buf.numel() < n:
            buf = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
            self._bufs[device] = buf
        return buf


_COUNTERS = ArrivalCounters()  # a device workspace, not state: always zero between calls


def sparse_attention_decode(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    topk_idx: torch.Tensor,
    md: AttentionMetadata,
    scale: float,
    req_idx: torch.Tensor | None = None,
    chunks: int | None = None,
    fused_merge: bool | None = None,
) -> torch.Tensor:
    """fused_merge None: the measured default (fused up to FUSED_MERGE_MAX_TOKENS tokens).
    One call at a time per device: the arrival counters are shared (the engine runs its
    layers on one stream)."""
    t, hq, d = q.shape
    hkv, k = topk_idx.shape[1], topk_idx.shape[2]
    g_size = hq // hkv
    c = chunks or decode_chunks(t, hkv, k)
    if c > k or k % c:
        raise ValueError(f"{c} partials do not divide a selection of {k} blocks")
    po = torch.empty((t, hkv, c, g_size, d), dtype=q.dtype, device=q.device)
    plse = torch.empty((t, hkv, c, g_size), dtype=torch.float32, device=q.device)
    dql = md.decode_query_len
    uniform = req_idx is None and md.num_decodes > 0 and t == md.num_decodes * dql
    if uniform:
        req = md.positions  # unused placeholder pointer: the kernel computes t // dql
    else:
        req = token_to_request(md, q.device) if req_idx is None else req_idx
    if fused_merge is None:
        fused_merge = t <= FUSED_MERGE_MAX_TOKENS
    fused = fused_merge and c > 1
    out = torch.empty_like(q)
    cnt = _COUNTERS.get(t * hkv, q.device) if fused else plse
    _decode_kernel[(t, hkv, c)](
        q,
        kv_cache,
        topk_idx,
        md.positions,
        req,
        md.block_tables,
        po,
        plse,
        out,
        cnt,
        q.stride()[:2],
        kv_cache.stride()[:3],
        topk_idx.stride()[:2],
        md.block_tables.stride(0),
        *partial_strides(po, plse, out),
        scale * LOG2E,
        dql,
        C=c,
        G=g_size,
        D=d,
        E=k // c,
        EP=next_pow2(k // c),
        BLK=BLOCK_SIZE,
        UNIFORM=uniform,
        KV_FP8=kv_cache.dtype == torch.float8_e4m3fn,
        FUSED_MERGE=fused,
        num_warps=4,
    )
    if fused:
        return out
    return _merge(po, plse, out, g_size)
