"""Routed experts computed on the CPU, from host memory, for the one-GPU full M3.

Each MoE layer's routed experts live in host RAM as int8 (one scale per output row, the form
the planner picks for FP8 checkpoints: the same size, and integer math the CPU has) or bf16.
A decode step hands the CPU the layer's input rows and the router's choice; the CPU reads only
the chosen experts' weights, so its speed is bounded by host read bandwidth (bench:
bench/offload_cpu_experts.py).

The torch reference of this op is `reference()` (dequantised fp32 weights): the tests compare
both against the native engine's own MoE module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..native.layers.mlp import swiglu_oai_merged
from .plan import ExpertForm


def quantize_rows_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: w [N, K] -> (int8 [N, K], bf16 scale [N])."""
    w = w.float()
    amax = w.abs().amax(dim=1).clamp(min=1e-12)
    scale = (amax / 127.0).to(torch.bfloat16)
    q = torch.round(w / scale.float()[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


@dataclass(slots=True)
class HostExpertLayer:
    """One MoE layer's routed experts: gate and up rows stacked ([E, 2I, h]), down [E, h, I]."""

    form: ExpertForm
    w13: torch.Tensor
    w2: torch.Tensor
    s13: torch.Tensor | None = None  # [E, 2I] bf16, int8 only
    s2: torch.Tensor | None = None  # [E, h] bf16, int8 only

    @property
    def num_experts(self) -> int:
        return self.w13.shape[0]

    def expert_bytes(self) -> int:
        """Bytes read for one expert (weights and scales)."""
        n = (
            self.w13[0].numel() * self.w13.element_size()
            + self.w2[0].numel() * self.w2.element_size()
        )
        if self.s13 is not None and self.s2 is not None:
            n += (self.s13[0].numel() + self.s2[0].numel()) * 2
        return n

    @classmethod
    def from_weights(
        cls,
        gate: list[torch.Tensor],
        up: list[torch.Tensor],
        down: list[torch.Tensor],
        form: ExpertForm,
        pin: bool = False,
    ) -> HostExpertLayer:
        """Per-expert [I, h], [I, h], [h, I] float weights -> the host form."""
        if form not in (ExpertForm.INT8, ExpertForm.BF16):
            raise ValueError(f"the CPU computes experts as int8 or bf16, not {form}")
        w13 = torch.stack([torch.cat([g, u], 0) for g, u in zip(gate, up, strict=True)])
        w2 = torch.stack(list(down))
        if form is ExpertForm.BF16:
            layer = cls(
                form, w13.to(torch.bfloat16).contiguous(), w2.to(torch.bfloat16).contiguous()
            )
        else:
            q13, s13 = zip(*(quantize_rows_int8(w) for w in w13), strict=True)
            q2, s2 = zip(*(quantize_rows_int8(w) for w in w2), strict=True)
            layer = cls(form, torch.stack(q13), torch.stack(q2), torch.stack(s13), torch.stack(s2))
        return layer.pinned() if pin else layer

    def pinned(self) -> HostExpertLayer:
        """Page-locked copies (for streaming to the GPU at prefill); needs CUDA."""
        pin = lambda t: None if t is None else t.pin_memory()  # noqa: E731
        return HostExpertLayer(self.form, pin(self.w13), pin(self.w2), pin(self.s13), pin(self.s2))


def _mm(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor | None) -> torch.Tensor:
    """x [T, K] bf16 @ w[N, K].T -> [T, N] bf16."""
    if s is None:
        return x @ w.t()
    return torch.ops.aten._weight_int8pack_mm(x, w, s)


class CpuExperts:
    """The routed-expert half of M3's MoE for the layers held in host memory."""

    def __init__(
        self,
        layers: dict[int, HostExpertLayer],
        *,
        alpha: float = 1.702,
        limit: float = 7.0,
        beta: float = 1.0,
    ) -> None:
        self.layers = layers
        self.alpha, self.limit, self.beta = alpha, limit, beta

    def forward(
        self, layer: int, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """x [T, h] (any dtype, CPU), ids [T, k] int64, weights [T, k] fp32 -> [T, h] fp32:
        sum over the chosen experts of weight x expert(x); shared expert not included."""
        L = self.layers[layer]
        xb = x.to(torch.bfloat16).contiguous()
        if xb.shape[0] == 1:  # decode at batch 1: no grouping, a few ops per expert
            out = torch.zeros(x.shape, dtype=torch.float32)
            for e, wt in zip(ids[0].tolist(), weights[0].tolist(), strict=True):
                out.add_(self._expert(L, e, xb), alpha=wt)
            return out
        out = torch.zeros(x.shape, dtype=torch.float32)
        for e in torch.unique(ids).tolist():
            tok, slot = (ids == e).nonzero(as_tuple=True)
            y = self._expert(L, e, xb.index_select(0, tok))
            out.index_add_(0, tok, y * weights[tok, slot][:, None])
        return out

    def _expert(self, L: HostExpertLayer, e: int, x: torch.Tensor) -> torch.Tensor:
        """One expert on bf16 rows -> fp32 rows."""
        s13 = None if L.s13 is None else L.s13[e]
        s2 = None if L.s2 is None else L.s2[e]
        act = swiglu_oai_merged(
            _mm(x, L.w13[e], s13).float(), self.alpha, self.limit, self.beta
        ).to(torch.bfloat16)
        return _mm(act, L.w2[e], s2).float()

    def reference(
        self, layer: int, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """The same op on dequantised fp32 weights, token by token."""
        L = self.layers[layer]
        out = torch.zeros(x.shape, dtype=torch.float32)
        for t in range(x.shape[0]):
            for j in range(ids.shape[1]):
                e = int(ids[t, j])
                w13, w2 = L.w13[e].float(), L.w2[e].float()
                if L.s13 is not None and L.s2 is not None:
                    w13 = w13 * L.s13[e].float()[:, None]
                    w2 = w2 * L.s2[e].float()[:, None]
                h = swiglu_oai_merged(x[t].float() @ w13.t(), self.alpha, self.limit, self.beta)
                out[t] += weights[t, j] * (h @ w2.t())
        return out


def physical_cores(sys_cpu: Path = Path("/sys/devices/system/cpu")) -> int:
    """Cores, not hyper-threads (memory-bound GEMV gains nothing from SMT siblings)."""
    seen = set()
    for topo in sys_cpu.glob("cpu[0-9]*/topology"):
        try:
            seen.add(
                (
                    (topo / "physical_package_id").read_text().strip(),
                    (topo / "core_id").read_text().strip(),
                )
            )
        except OSError:
            continue
    return len(seen) or (os.cpu_count() or 1)
