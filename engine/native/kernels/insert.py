"""Scatter new tokens' K/V and index keys into the paged caches (bf16 or fp8 e4m3).

slot = physical_page * 128 + offset; a negative slot is padding and is skipped.
FP8 caches store x / scale (scale 1.0 by default), saturated to e4m3's +-448.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..core.attention_metadata import BLOCK_SIZE
from ..layers.attention import insert_index as torch_insert_index
from ..layers.attention import insert_kv as torch_insert_kv


@triton.jit
def _insert_rows_kernel(
    src_ptr,
    dst_ptr,
    slot_ptr,
    stride_src_t,
    stride_src_h,
    stride_dst_page,
    stride_dst_h,
    stride_dst_off,
    dst_col0,
    inv_scale,
    D: tl.constexpr,
    BLK: tl.constexpr,
    IS_FP8: tl.constexpr,
):
    t = tl.program_id(0)
    h = tl.program_id(1)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot >= 0:
        page = slot // BLK
        off = slot % BLK
        d = tl.arange(0, D)
        x = tl.load(src_ptr + t * stride_src_t + h * stride_src_h + d).to(tl.float32)
        if IS_FP8:
            x = tl.clamp(x * inv_scale, -448.0, 448.0)
        dst = (
            dst_ptr
            + page * stride_dst_page
            + h * stride_dst_h
            + off * stride_dst_off
            + dst_col0
            + d
        )
        tl.store(dst, x.to(dst_ptr.dtype.element_ty))


def _launch(
    src: torch.Tensor,
    dst: torch.Tensor,
    slots: torch.Tensor,
    col0: int,
    heads_dst: bool,
    scale: float,
) -> None:
    t, h, d = src.shape
    if t == 0:
        return
    stride_dst_h = dst.stride(1) if heads_dst else 0
    stride_dst_off = dst.stride(2) if heads_dst else dst.stride(1)
    _insert_rows_kernel[(t, h)](
        src,
        dst,
        slots,
        src.stride(0),
        src.stride(1),
        dst.stride(0),
        stride_dst_h,
        stride_dst_off,
        col0,
        1.0 / scale,
        D=d,
        BLK=BLOCK_SIZE,
        IS_FP8=dst.dtype == torch.float8_e4m3fn,
    )


def insert_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    scale: float = 1.0,
) -> None:
    """k, v [T, Hkv, D] -> kv_cache [pages, Hkv, 128, 2D] (K in [:D], V in [D:])."""
    d = k.shape[-1]
    slots = slot_mapping.contiguous()
    _launch(k, kv_cache, slots, 0, True, scale)
    _launch(v, kv_cache, slots, d, True, scale)


def insert_index(
    ik: torch.Tensor, index_cache: torch.Tensor, slot_mapping: torch.Tensor, scale: float = 1.0
) -> None:
    """ik [T, Di] -> index_cache [pages, 128, Di]."""
    _launch(ik.unsqueeze(1), index_cache, slot_mapping.contiguous(), 0, False, scale)


# The torch reference, which is also the CPU path (the op table's insert_kv / insert_index).
reference_insert_kv = torch_insert_kv
reference_insert_index = torch_insert_index
reference = reference_insert_kv
