"""Gated MLPs: M3's clamped SwiGLU-OAI and Llama's SiLU MLP (checkpoint names
gate_proj / up_proj / down_proj)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

from .linear import FusedLayer, FusedWeights, Linear, Placement
from .op_table import OpTable, resolve_ops


def swiglu_oai(
    gate: torch.Tensor,
    up: torch.Tensor,
    alpha: float = 1.702,
    limit: float = 7.0,
    beta: float = 1.0,
) -> torch.Tensor:
    """SPEC §1.6: gate clamped from above only, up on both sides, (up + beta)."""
    gate = gate.clamp(max=limit)
    up = up.clamp(min=-limit, max=limit)
    return gate * torch.sigmoid(alpha * gate) * (up + beta)


def swiglu_oai_merged(
    gate_up: torch.Tensor, alpha: float = 1.702, limit: float = 7.0, beta: float = 1.0
) -> torch.Tensor:
    """The `[all gates | all ups]` layout of vLLM's merged projection (not interleaved)."""
    g, u = gate_up.chunk(2, dim=-1)
    return swiglu_oai(g, u, alpha, limit, beta)


class SwigluArgs(Placement):
    """SwigluOAIMLP's activation constants with its placement (passed on as **kwargs)."""

    alpha: float
    limit: float
    beta: float


class SwigluOAIMLP(nn.Module, FusedLayer):
    def __init__(
        self,
        hidden: int,
        inter: int,
        *,
        alpha: float,
        limit: float,
        beta: float,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
        names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj"),
        ops: OpTable | None = None,
    ) -> None:
        super().__init__()
        self.alpha, self.limit, self.beta = alpha, limit, beta
        self.ops = ops or resolve_ops(device, dtype)
        self._names = names
        for n, (i, o) in zip(
            names, ((hidden, inter), (hidden, inter), (inter, hidden)), strict=True
        ):
            self.add_module(n, Linear(i, o, dtype=dtype, device=device))
        # gate and up as one [2I, H] GEMM, then one activation launch (CUDA path)
        self._gate_up = FusedWeights(getattr(self, names[0]), getattr(self, names[1]))
        self._merged: Callable[..., torch.Tensor] | None = None  # chosen by finalize
        self.finalize()

    def finalize(self) -> None:
        """Keeps the merged gate|up kernel when there is one and gate and up are still views
        of the fused tensor (else its GEMM would read stale weights); None: the per-Linear
        body. Whoever rewires the Linears (MoE's stacked experts) calls it again."""
        op = self.ops.swiglu_oai_merged
        self._merged = op if op is not None and self._gate_up.intact() else None

    def projections(self) -> tuple[Linear, Linear, Linear]:
        """gate, up and down, whatever the checkpoint calls them."""
        g, u, d = (getattr(self, n) for n in self._names)
        return g, u, d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g, u, d = self.projections()
        op = self._merged
        if op is not None and x.dim() == 2:
            return d(op(self._gate_up(x), self.alpha, self.limit, self.beta))
        return d(swiglu_oai(g(x), u(x), self.alpha, self.limit, self.beta))


class SiluMLP(nn.Module):
    def __init__(
        self, hidden: int, inter: int, *, dtype: torch.dtype, device: torch.device | str = "cpu"
    ) -> None:
        super().__init__()
        self.gate_proj = Linear(hidden, inter, dtype=dtype, device=device)
        self.up_proj = Linear(hidden, inter, dtype=dtype, device=device)
        self.down_proj = Linear(inter, hidden, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    if TYPE_CHECKING:  # for mypy only: nn.Module.__call__ (which runs forward) returns Any

        def __call__(self, x: torch.Tensor) -> torch.Tensor: ...
