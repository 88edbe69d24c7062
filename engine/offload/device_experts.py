"""Routed experts computed on the GPU from their host form (hot-expert cache, prefill stream).

The GPU copies of an expert keep the host form's bytes (int8 rows with their scales, or bf16),
so a hot or streamed expert computes the same function as the CPU's copy and costs the same
memory as the plan's row. This module dequantises one expert at a time to the activation dtype
just before its two GEMMs.

A form is a HostExpertLayer's tensor fields; forms other than bf16 and int8-per-row (int4 per
group, MXFP8) add their dequantisation to `expert_weights`.
"""

from __future__ import annotations

from dataclasses import fields

import torch

from ..native.layers.mlp import swiglu_oai_merged
from .cpu_experts import HostExpertLayer
from .plan import ExpertForm


def tensor_fields(layer: HostExpertLayer) -> dict[str, torch.Tensor]:
    """The layer's tensors by field name, each with the expert index first."""
    out = {}
    for f in fields(layer):
        v = getattr(layer, f.name)
        if isinstance(v, torch.Tensor):
            out[f.name] = v
    return out


def _mm(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """x [n, K] bf16 @ w [N, K].T -> [n, N] bf16, one rounding at the end as the CPU kernels
    round: bf16 weights straight; int8 rows summed in fp32 and scaled before rounding."""
    if scale is None:
        return x @ w.t()
    if x.is_cuda:  # tensor cores: the bf16 product, then the scale (one more rounding)
        return (x @ w.to(x.dtype).t()) * scale.to(x.dtype)
    return ((x.float() @ w.float().t()) * scale.float()).to(torch.bfloat16)


def expert_forward(
    form: ExpertForm,
    t: dict[str, torch.Tensor],
    slot: int,
    x: torch.Tensor,
    alpha: float,
    limit: float,
    beta: float,
) -> torch.Tensor:
    """Expert `slot` of the tensors `t` on rows x [n, h] -> [n, h] fp32, rounded to bf16 at
    the same points as CpuExperts (inputs, both GEMM outputs, the activation), so a hot or
    streamed expert gives what the CPU would have given."""
    if form not in (ExpertForm.BF16, ExpertForm.INT8):
        raise ValueError(f"no GPU path for expert form {form}")
    s13 = t["s13"][slot] if form is ExpertForm.INT8 else None
    s2 = t["s2"][slot] if form is ExpertForm.INT8 else None
    xb = x.to(torch.bfloat16)
    gu = _mm(xb, t["w13"][slot].to(torch.bfloat16) if s13 is None else t["w13"][slot], s13)
    gu = gu.float()
    act = swiglu_oai_merged(gu, alpha, limit, beta).to(torch.bfloat16)
    return _mm(act, t["w2"][slot], s2).float()


def expert_weights(
    form: ExpertForm, t: dict[str, torch.Tensor], slot: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(w13 [2I, h], w2 [h, I]) of expert `slot`, dequantised to fp32."""
    if form is ExpertForm.BF16:
        return t["w13"][slot].float(), t["w2"][slot].float()
    if form is ExpertForm.INT8:
        w13 = t["w13"][slot].float() * t["s13"][slot].float()[:, None]
        w2 = t["w2"][slot].float() * t["s2"][slot].float()[:, None]
        return w13, w2
    raise ValueError(f"no dequantisation for expert form {form}")


def dequantised(layer: HostExpertLayer, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """All experts dequantised: ([E, 2I, h], [E, h, I]) in dtype, for the all-on-device
    reference whose expert weights are exactly the host form's values."""
    t = tensor_fields(layer)
    pairs = [expert_weights(layer.form, t, e) for e in range(layer.num_experts)]
    return (
        torch.stack([p[0] for p in pairs]).to(dtype),
        torch.stack([p[1] for p in pairs]).to(dtype),
    )
