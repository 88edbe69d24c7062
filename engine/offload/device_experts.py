"""Routed experts computed on the GPU (hot-expert cache, prefill stream).

Two forms meet here. The host form (int8 rows with their scales, int4 with mins, or bf16, tiled
as engine/offload/forms.py lays them out) is what crosses PCIe: the prefill stream copies
groups of experts in it and dequantises each expert once per chunk, over thousands of tokens.
The compute form (bf16, dequantised once) is what a decode step reads: a hot expert is kept in
it, so serving one from the GPU costs two small GEMMs over bf16 weights (tens of microseconds)
instead of dequantising the tiled form on every call (what made the earlier cache slow decode
down: docs/offload.md, the H200 section). Both forms compute the same function as the CPU's
copy; every host form dequantises through forms.dequantize, on whichever device holds it.
"""

from __future__ import annotations

import torch

from ..native.layers.mlp import swiglu_oai_merged
from . import forms
from .cpu_experts import HostExpertLayer
from .plan import ExpertForm


def tensor_fields(layer: HostExpertLayer) -> dict[str, torch.Tensor]:
    """The layer's tensors by field name, each with the expert index first."""
    return layer.tensors()


def empty_slots(layer: HostExpertLayer, n: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Room on `device` for n experts in the layer's form: its tensor fields with n experts
    (contents undefined until experts are copied in)."""
    return {
        k: torch.empty((n, *v.shape[1:]), dtype=v.dtype, device=device)
        for k, v in tensor_fields(layer).items()
    }


def _projection(t: dict[str, torch.Tensor], slot: int, which: str) -> dict[str, torch.Tensor]:
    """Expert `slot`'s tensors of one projection ('13' or '2') as forms.pack laid them out."""
    return {p: t[p + which][slot] for p in ("w", "s", "m") if p + which in t}


def expert_weights(
    form: ExpertForm, t: dict[str, torch.Tensor], slot: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(w13 [2I, h] gate rows then up rows, w2 [h, I]) of expert `slot`, dequantised to fp32
    on the tensors' device (forms.dequantize is the torch reference of every host form)."""
    if form.value not in forms.CHUNK:
        raise ValueError(f"no dequantisation for expert form {form}")
    w13 = forms.split_gate_up(forms.dequantize(_projection(t, slot, "13"), form.value))
    return w13, forms.dequantize(_projection(t, slot, "2"), form.value)


def compute_weights(
    form: ExpertForm, t: dict[str, torch.Tensor], slot: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Expert `slot` in the form the device computes with: (w13, w2) in bf16. Rounding the
    dequantised weights to bf16 here or inside the GEMM gives the same values, so a copy kept
    in this form (the hot-expert cache) computes exactly what the host form does."""
    w13, w2 = expert_weights(form, t, slot)
    return w13.to(torch.bfloat16), w2.to(torch.bfloat16)


def expert_forward(
    w13: torch.Tensor,
    w2: torch.Tensor,
    x: torch.Tensor,
    alpha: float,
    limit: float,
    beta: float,
) -> torch.Tensor:
    """One expert (bf16 weights from compute_weights) on rows x [n, h] -> [n, h] fp32: two
    bf16 GEMMs with the activation between them rounded to bf16, as the CPU computes them
    (the input, the activation and the output are the points both round at)."""
    xb = x.to(torch.bfloat16)
    gu = (xb @ w13.t()).float()
    act = swiglu_oai_merged(gu, alpha, limit, beta).to(torch.bfloat16)
    return (act @ w2.t()).float()


def add_expert(
    out: torch.Tensor,
    x: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    expert: int,
    w13: torch.Tensor,
    w2: torch.Tensor,
    alpha: float,
    limit: float,
    beta: float,
) -> None:
    """out [T, h] fp32 += routing weight x expert(x) on the tokens routed to `expert`, whose
    bf16 weights are (w13, w2). ids/weights [T, k] may be host tensors: the routed pairs move
    to x's device."""
    tok, choice = (ids == expert).nonzero(as_tuple=True)
    wt = weights[tok, choice].to(x.device, non_blocking=True)
    tok = tok.to(x.device, non_blocking=True)
    y = expert_forward(w13, w2, x.index_select(0, tok), alpha, limit, beta)
    out.index_add_(0, tok, y * wt[:, None])


def dequantised(layer: HostExpertLayer, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """All experts dequantised: ([E, 2I, h], [E, h, I]) in dtype, for the all-on-device
    reference whose expert weights are exactly the host form's values."""
    t = tensor_fields(layer)
    pairs = [expert_weights(layer.form, t, e) for e in range(layer.num_experts)]
    return (
        torch.stack([p[0] for p in pairs]).to(dtype),
        torch.stack([p[1] for p in pairs]).to(dtype),
    )
