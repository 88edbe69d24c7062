"""Fused per-head Gemma QK-norm + partial NeoX RoPE + paged insert (SPEC 1.4, 2.2 step 2).

One program per (token, head vector): the q heads and index-q heads are normed and rotated in
place; the k heads and the one index-key head are normed, rotated and written straight into the
paged caches (v copied beside k), so the normed keys never make a round trip through memory.
cos_sin_cache is vLLM's layout: [max_position, rotary_dim], cos in the first half, sin in the
second.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..core.attention_metadata import BLOCK_SIZE
from ..layers.norm import gemma_rms_norm
from ..layers.rope import rotate_neox
from .insert import reference_insert_index, reference_insert_kv


@triton.jit
def _norm_rope(x_ptr, w_ptr, cs_ptr, stride_cs, pos, eps, D: tl.constexpr, ROT: tl.constexpr):
    half: tl.constexpr = ROT // 2
    d = tl.arange(0, D)
    in_rot = d < ROT
    partner = tl.where(d < half, d + half, tl.where(in_rot, d - half, d))
    sign = tl.where(d < half, -1.0, 1.0)
    x = tl.load(x_ptr + d).to(tl.float32)
    xp = tl.load(x_ptr + partner).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / D + eps)
    w = tl.load(w_ptr + d).to(tl.float32)
    wp = tl.load(w_ptr + partner).to(tl.float32)
    xn = x * rstd * (1.0 + w)
    xpn = xp * rstd * (1.0 + wp)
    cidx = d % half
    cos = tl.load(cs_ptr + pos * stride_cs + cidx, mask=in_rot, other=1.0).to(tl.float32)
    sin = tl.load(cs_ptr + pos * stride_cs + half + cidx, mask=in_rot, other=0.0).to(tl.float32)
    return xn * cos + sign * xpn * sin


@triton.jit
def _fused_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    iq_ptr,
    ik_ptr,
    iqo_ptr,
    qw_ptr,
    kw_ptr,
    iqw_ptr,
    ikw_ptr,
    cs_ptr,
    pos_ptr,
    slot_ptr,
    kv_ptr,
    idx_ptr,
    sq_t,
    sq_h,
    sk_t,
    sk_h,
    sv_t,
    sv_h,
    siq_t,
    siq_h,
    siqo_t,
    siqo_h,
    sik_t,
    stride_cs,
    skv_page,
    skv_h,
    skv_off,
    sidx_page,
    sidx_off,
    eps,
    HQ: tl.constexpr,
    HKV: tl.constexpr,
    HI: tl.constexpr,
    D: tl.constexpr,
    DI: tl.constexpr,
    ROT: tl.constexpr,
    BLK: tl.constexpr,
    KV_FP8: tl.constexpr,
    IDX_FP8: tl.constexpr,
    IQ_FP8: tl.constexpr,
):
    t = tl.program_id(0)
    h = tl.program_id(1)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    page = slot // BLK
    off = slot % BLK
    d = tl.arange(0, D)
    di = tl.arange(0, DI)
    if h < HQ:
        y = _norm_rope(q_ptr + t * sq_t + h * sq_h, qw_ptr, cs_ptr, stride_cs, pos, eps, D, ROT)
        tl.store(q_ptr + t * sq_t + h * sq_h + d, y.to(q_ptr.dtype.element_ty))
    elif h < HQ + HKV:
        g = h - HQ
        y = _norm_rope(k_ptr + t * sk_t + g * sk_h, kw_ptr, cs_ptr, stride_cs, pos, eps, D, ROT)
        v = tl.load(v_ptr + t * sv_t + g * sv_h + d).to(tl.float32)
        if KV_FP8:
            y = tl.clamp(y, -448.0, 448.0)
            v = tl.clamp(v, -448.0, 448.0)
        if slot >= 0:
            base = kv_ptr + page * skv_page + g * skv_h + off * skv_off
            tl.store(base + d, y.to(kv_ptr.dtype.element_ty))
            tl.store(base + D + d, v.to(kv_ptr.dtype.element_ty))
    elif h < HQ + HKV + HI:
        j = h - HQ - HKV
        y = _norm_rope(
            iq_ptr + t * siq_t + j * siq_h, iqw_ptr, cs_ptr, stride_cs, pos, eps, DI, ROT
        )
        if IQ_FP8:  # an e4m3 index cache scores e4m3 queries: quantised here, not by 3 launches
            y = tl.clamp(y, -448.0, 448.0)
        tl.store(iqo_ptr + t * siqo_t + j * siqo_h + di, y.to(iqo_ptr.dtype.element_ty))
    else:
        y = _norm_rope(ik_ptr + t * sik_t, ikw_ptr, cs_ptr, stride_cs, pos, eps, DI, ROT)
        if IDX_FP8:
            y = tl.clamp(y, -448.0, 448.0)
        if slot >= 0:
            tl.store(
                idx_ptr + page * sidx_page + off * sidx_off + di, y.to(idx_ptr.dtype.element_ty)
            )


def fused_qknorm_rope_insert(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    iq: torch.Tensor | None,
    ik: torch.Tensor | None,
    q_norm_w: torch.Tensor,
    k_norm_w: torch.Tensor,
    iq_norm_w: torch.Tensor | None,
    ik_norm_w: torch.Tensor | None,
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,
    eps: float,
    kv_cache: torch.Tensor,
    index_cache: torch.Tensor | None,
    slot_mapping: torch.Tensor,
    iq_out: torch.Tensor | None = None,
) -> None:
    """q [T,Hq,D], k/v [T,Hkv,D], iq [T,Hi,Di], ik [T,Di]: q and iq are rewritten in place
    (iq into iq_out instead when given, e.g. an e4m3 [T,Hi,Di] buffer for an fp8 index)."""
    t, hq, d = q.shape
    if t == 0:
        return
    hkv = k.shape[1]
    has_idx = iq is not None and ik is not None and index_cache is not None
    # without an index: q stands in for the index tensors (never read, HI == 0)
    iq_, ik_, idx = (
        (iq, ik, index_cache)
        if iq is not None and ik is not None and index_cache is not None
        else (q, q[:, 0], kv_cache)
    )
    iqw, ikw = (iq_norm_w, ik_norm_w) if has_idx else (q_norm_w, q_norm_w)
    hi = iq_.shape[1] if has_idx else 0
    di = iq_.shape[2] if has_idx else d
    sidx_page, sidx_off = (idx.stride(0), idx.stride(1)) if has_idx else (0, 0)
    n_prog = hq + hkv + (hi + 1 if has_idx else 0)
    iqo = iq_out if (has_idx and iq_out is not None) else iq_
    _fused_kernel[(t, n_prog)](
        q,
        k,
        v,
        iq_,
        ik_,
        iqo,
        q_norm_w,
        k_norm_w,
        iqw,
        ikw,
        cos_sin_cache,
        positions,
        slot_mapping,
        kv_cache,
        idx,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        iq_.stride(0),
        iq_.stride(1),
        iqo.stride(0),
        iqo.stride(1),
        ik_.stride(0),
        cos_sin_cache.stride(0),
        kv_cache.stride(0),
        kv_cache.stride(1),
        kv_cache.stride(2),
        sidx_page,
        sidx_off,
        eps,
        HQ=hq,
        HKV=hkv,
        HI=hi,
        D=d,
        DI=di,
        ROT=cos_sin_cache.shape[1],
        BLK=BLOCK_SIZE,
        KV_FP8=kv_cache.dtype == torch.float8_e4m3fn,
        IDX_FP8=idx.dtype == torch.float8_e4m3fn,
        IQ_FP8=iqo.dtype == torch.float8_e4m3fn,
    )


def _ref_norm_rope(
    x: torch.Tensor,
    w: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """The layers' norm and rotation (layers/norm.py, layers/rope.py), kept in fp32 between
    them as the kernel keeps them; cos_sin_cache rows are cos | sin."""
    cos, sin = cos_sin_cache[positions.long()].float().chunk(2, dim=-1)
    return rotate_neox(gemma_rms_norm(x.float(), w, eps), cos, sin)


def reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    iq: torch.Tensor | None,
    ik: torch.Tensor | None,
    q_norm_w: torch.Tensor,
    k_norm_w: torch.Tensor,
    iq_norm_w: torch.Tensor | None,
    ik_norm_w: torch.Tensor | None,
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,
    eps: float,
    kv_cache: torch.Tensor,
    index_cache: torch.Tensor | None,
    slot_mapping: torch.Tensor,
    iq_out: torch.Tensor | None = None,
) -> None:
    """Plain torch, fp32 maths: Gemma RMSNorm ((1 + w) weights), then NeoX RoPE on the first
    rotary_dim channels; same in-place contract as the kernel."""
    q.copy_(_ref_norm_rope(q, q_norm_w, cos_sin_cache, positions, eps).to(q.dtype))
    kn = _ref_norm_rope(k, k_norm_w, cos_sin_cache, positions, eps)
    reference_insert_kv(kn, v.float(), kv_cache, slot_mapping)
    if iq is not None and ik is not None and index_cache is not None:
        assert iq_norm_w is not None and ik_norm_w is not None, "the index needs its norm weights"
        iqn = _ref_norm_rope(iq, iq_norm_w, cos_sin_cache, positions, eps)
        if iq_out is not None:
            iq_out.copy_(
                iqn.clamp(-448.0, 448.0).to(iq_out.dtype)
                if iq_out.dtype == torch.float8_e4m3fn
                else iqn.to(iq_out.dtype)
            )
        else:
            iq.copy_(iqn.to(iq.dtype))
        ikn = _ref_norm_rope(ik[:, None], ik_norm_w, cos_sin_cache, positions, eps)[:, 0]
        reference_insert_index(ikn, index_cache, slot_mapping)
