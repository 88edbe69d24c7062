"""RMSNorms. Both compute in fp32 and return the input dtype."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from .op_table import OpTable, resolve_ops


def gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """SPEC §1.4 in fp32, returned in x's dtype."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * (1.0 + weight.float())).to(x.dtype)


def add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(norm(x + residual), x + residual): the add rounds to the inputs' dtype, the norm runs
    in fp32. The torch path of kernels/add_rmsnorm.py, and its reference."""
    res = x if residual is None else x + residual
    return gemma_rms_norm(res, weight, eps), res


class _Norm(nn.Module):
    """A [dim] weight (filled with `initial`, until a checkpoint overwrites it), eps, and the
    op table for the fused kernels a norm may use (resolved here for a norm built alone)."""

    initial = 1.0

    def __init__(
        self,
        dim: int,
        eps: float,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        ops: OpTable | None = None,
    ) -> None:
        super().__init__()
        self.eps = eps
        self.ops = ops or resolve_ops(device, dtype)
        self.weight = nn.Parameter(
            torch.full((dim,), self.initial, dtype=dtype, device=device), requires_grad=False
        )

    if TYPE_CHECKING:  # for mypy only: nn.Module.__call__ (which runs forward) returns Any

        def __call__(self, x: torch.Tensor) -> torch.Tensor: ...


class GemmaRMSNorm(_Norm):
    """M3's norm (SPEC §1.4): y = x * rsqrt(mean(x^2) + eps) * (1 + w); w is stored as an
    offset from 1 (initialised at 0). Applied over the last dim, so per head for QK-norm."""

    initial = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gemma_rms_norm(x, self.weight, self.eps)

    def add_forward(
        self, x: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(x + residual), x + residual), or (norm(x), x) without a residual: the
        decoder's pre-norm step, one Triton launch on CUDA (kernels/add_rmsnorm.py)."""
        op = self.ops.add_rmsnorm if x.dim() == 2 else None
        return (op or add_rmsnorm)(x, residual, self.weight, self.eps)


class RMSNorm(_Norm):
    """Llama's norm: weight multiplies the normalised value cast back to the input dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)
        return self.weight * y
