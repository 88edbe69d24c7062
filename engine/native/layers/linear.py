"""Bias-free linear and embedding layers whose weights are allocated, not initialised.

Checkpoints overwrite every weight, so random init would only cost time (minutes for M3).
"""

from __future__ import annotations

import torch
from torch import nn


class Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, *, dtype: torch.dtype,
                 device: torch.device | str = "cpu") -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype,
                                               device=device), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x.to(self.weight.dtype), self.weight)


class Embedding(nn.Module):
    def __init__(self, num_embeddings: int, dim: int, *, dtype: torch.dtype,
                 device: torch.device | str = "cpu") -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, dim, dtype=dtype, device=device),
                                   requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.embedding(ids, self.weight)
