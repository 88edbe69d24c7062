"""RMSNorms. Both compute in fp32 and return the input dtype."""

from __future__ import annotations

import torch
from torch import nn


class GemmaRMSNorm(nn.Module):
    """M3's norm (SPEC §1.4): y = x * rsqrt(mean(x^2) + eps) * (1 + w); w is stored as an
    offset from 1 (initialised at 0). Applied over the last dim, so per head for QK-norm."""

    def __init__(self, dim: int, eps: float, *, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim, dtype=dtype, device=device),
                                   requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).to(x.dtype)


class RMSNorm(nn.Module):
    """Llama's norm: weight multiplies the normalised value cast back to the input dtype."""

    def __init__(self, dim: int, eps: float, *, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype, device=device),
                                   requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)
        return self.weight * y
