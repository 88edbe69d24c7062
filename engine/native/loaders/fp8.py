"""The FP8 weight forms of M3 checkpoints: 128x128 block scales (the released FP8
checkpoints) and MXFP8 (ModelOpt e4m3 with one e8m0 scale per 1x32 block), with the inverse
quantizers that write test checkpoints. Torch only: the loaders and the expert offload both
read these, so neither depends on the other for them."""

from __future__ import annotations

import torch

FP8_BLOCK = 128


def dequantize_fp8(
    w: torch.Tensor, scale_inv: torch.Tensor, block: int = FP8_BLOCK
) -> torch.Tensor:
    """e4m3 weight [out, in] times its per-(128x128 block) scale [ceil(out/128), ceil(in/128)]."""
    out_f, in_f = w.shape
    want = (-(-out_f // block), -(-in_f // block))
    if tuple(scale_inv.shape) != want:
        raise ValueError(f"FP8 block scale has shape {tuple(scale_inv.shape)}, expected {want}")
    s = scale_inv.float().repeat_interleave(block, 0)[:out_f].repeat_interleave(block, 1)[:, :in_f]
    return w.float() * s


def quantize_fp8(w: torch.Tensor, block: int = FP8_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse, for writing FP8 test checkpoints: per-block absmax scaled to e4m3's 448."""
    out_f, in_f = w.shape
    nb_o, nb_i = -(-out_f // block), -(-in_f // block)
    pad = torch.zeros(nb_o * block, nb_i * block, dtype=torch.float32)
    pad[:out_f, :in_f] = w.float()
    blocks = pad.view(nb_o, block, nb_i, block)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)
    scale = amax / 448.0
    q = (blocks / scale[:, None, :, None]).view(nb_o * block, nb_i * block)[:out_f, :in_f]
    return q.to(torch.float8_e4m3fn), scale


MX_BLOCK = 32
# e8m0 exponents: uint8 on disk here (safetensors "U8"), torch's float8_e8m0fnu where it exists
_E8M0 = tuple(d for d in (torch.uint8, getattr(torch, "float8_e8m0fnu", None)) if d is not None)


def is_mx_scale(scale: torch.Tensor) -> bool:
    """MXFP8 (ModelOpt) scales are e8m0 bytes, one per 1x32 block; 128x128 block scales are
    floats (vLLM's M3 loader reads both from `weight_scale_inv`)."""
    return scale.dtype in _E8M0


def mxfp8_exponents(w: torch.Tensor, scale: torch.Tensor, block: int = MX_BLOCK) -> torch.Tensor:
    """The e8m0 scale of weight w [out, in] as uint8 exponents [out, ceil(in/32)], checked:
    its shape, and no NaN code (255)."""
    out_f, in_f = w.shape
    want = (out_f, -(-in_f // block))
    if tuple(scale.shape) != want:
        raise ValueError(f"MXFP8 scale has shape {tuple(scale.shape)}, expected {want}")
    e = scale.view(torch.uint8)
    if bool((e == 255).any()):
        raise ValueError("MXFP8 scale holds the e8m0 NaN code 255")
    return e


def dequantize_mxfp8(w: torch.Tensor, scale: torch.Tensor, block: int = MX_BLOCK) -> torch.Tensor:
    """e4m3 weight [out, in] times 2^(e - 127) per 1x32 block, e [out, ceil(in/32)] e8m0."""
    in_f = w.shape[1]
    e = mxfp8_exponents(w, scale, block).float()
    s = torch.exp2(e - 127.0).repeat_interleave(block, 1)[:, :in_f]
    return w.float() * s


def quantize_mxfp8(w: torch.Tensor, block: int = MX_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse, for writing MXFP8 test checkpoints: per 1x32 block the smallest power of
    two that brings the absmax within e4m3's 448; scales as uint8 e8m0 exponents."""
    out_f, in_f = w.shape
    nb = -(-in_f // block)
    pad = torch.zeros(out_f, nb * block, dtype=torch.float32, device=w.device)
    pad[:, :in_f] = w.float()
    g = pad.view(out_f, nb, block)
    ex = torch.ceil(torch.log2(g.abs().amax(-1).clamp(min=1e-30) / 448.0)).clamp(-127, 127)
    q = (g / torch.exp2(ex)[..., None]).clamp(-448.0, 448.0).view(out_f, nb * block)[:, :in_f]
    return q.to(torch.float8_e4m3fn), (ex + 127).to(torch.uint8)
