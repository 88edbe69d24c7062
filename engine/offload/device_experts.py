"""Routed experts computed on the GPU from their host form (hot-expert cache, prefill stream).

The GPU copies of an expert keep the host form's bytes (int8 rows with their scales, or bf16),
so a hot or streamed expert computes the same function as the CPU's copy and costs the same
memory as the plan's row. This module dequantises one expert at a time to the activation dtype
just before its two GEMMs.

A form is a HostExpertLayer's tensor fields (tiled as engine/offload/forms.py lays them out);
every form dequantises through forms.dequantize, on whichever device holds the tensors.
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


def expert_forward(
    form: ExpertForm,
    t: dict[str, torch.Tensor],
    slot: int,
    x: torch.Tensor,
    alpha: float,
    limit: float,
    beta: float,
) -> torch.Tensor:
    """Expert `slot` of the tensors `t` on rows x [n, h] -> [n, h] fp32: the weights
    dequantised on the device, then two bf16 GEMMs with the activation between them rounded
    to bf16, as the CPU computes them (the input, the activation and the output are the
    points both round at)."""
    w13, w2 = expert_weights(form, t, slot)
    xb = x.to(torch.bfloat16)
    gu = (xb @ w13.to(torch.bfloat16).t()).float()
    act = swiglu_oai_merged(gu, alpha, limit, beta).to(torch.bfloat16)
    return (act @ w2.to(torch.bfloat16).t()).float()


def add_expert(
    out: torch.Tensor,
    x: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    expert: int,
    form: ExpertForm,
    t: dict[str, torch.Tensor],
    slot: int,
    alpha: float,
    limit: float,
    beta: float,
) -> None:
    """out [T, h] fp32 += routing weight x expert(x) on the tokens routed to `expert`, whose
    weights are slot `slot` of `t`. ids/weights [T, k] may be host tensors: the routed pairs
    move to x's device."""
    tok, choice = (ids == expert).nonzero(as_tuple=True)
    wt = weights[tok, choice].to(x.device, non_blocking=True)
    tok = tok.to(x.device, non_blocking=True)
    y = expert_forward(form, t, slot, x.index_select(0, tok), alpha, limit, beta)
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
