"""Bias-free linear and embedding layers whose weights are allocated, not initialised.

Checkpoints overwrite every weight, so random init would only cost time (minutes for M3).
`fuse_weights` lays several linears' weights out as row blocks of one tensor, so a layer can
run one GEMM for all of them (q|k|v|index, gate|up) while each Linear keeps its own
checkpoint-named parameter (a view of the fused tensor; loaders copy into it in place).

Whether a layer runs the fused body or the per-Linear one is decided once, in its `finalize`
(`FusedLayer`), not on every forward: the model calls it at the end of the build, the loaders
again once the weights and the offload placement are in, and `CausalLM._apply` after
`model.to()` / `.half()` (which move each parameter to storage of its own).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

import torch
from torch import nn


class Placement(TypedDict):
    """Where and in which dtype a layer allocates its weights (passed on as **kwargs)."""

    dtype: torch.dtype
    device: torch.device | str


class Linear(nn.Module):
    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(
            torch.empty(out_features, in_features, dtype=dtype, device=device), requires_grad=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x.to(self.weight.dtype), self.weight)

    if TYPE_CHECKING:  # for mypy only: nn.Module.__call__ (which runs forward) returns Any

        def __call__(self, x: torch.Tensor) -> torch.Tensor: ...


class FusedWeights:
    """Row blocks of one [sum(out), in] tensor, one per Linear (not a Module: its tensor is
    reached through the Linears' parameters, so state_dict and loaders see no new names)."""

    __slots__ = ("weight", "linears", "splits")

    def __init__(self, *linears: Linear) -> None:
        ws = [lin.weight for lin in linears]
        if len({(w.shape[1], w.dtype, w.device) for w in ws}) != 1:
            raise ValueError("fused linears need one input width, dtype and device")
        self.weight = torch.cat([w.data for w in ws])
        self.linears = linears
        self.splits = tuple(w.shape[0] for w in ws)
        row = 0
        for lin, n in zip(linears, self.splits, strict=True):
            lin.weight = nn.Parameter(self.weight[row : row + n], requires_grad=False)
            row += n

    def intact(self) -> bool:
        """False once someone replaced a parameter (model.to(), a manual assignment): then
        the fused GEMM would read stale weights and the layer must take the per-Linear path.
        Asked by the layers' `finalize` (once per build, load or move), never per forward."""
        base = self.weight.data_ptr()
        row_bytes = self.weight.stride(0) * self.weight.element_size()
        row = 0
        for lin, n in zip(self.linears, self.splits, strict=True):
            if lin.weight.data_ptr() != base + row * row_bytes:
                return False
            row += n
        return True

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x.to(self.weight.dtype), self.weight)


class FusedLayer:
    """A layer with a fused body (one GEMM over FusedWeights, a fused kernel) and a
    per-Linear one. `finalize` chooses between them once and records the choice; forward
    only reads it. After replacing a parameter (or the op table) by hand, call `finalize`
    again (CausalLM.finalize does it for a whole model): until then the old choice stands."""

    def finalize(self) -> None:
        raise NotImplementedError


class Embedding(nn.Module):
    def __init__(
        self,
        num_embeddings: int,
        dim: int,
        *,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(
            torch.empty(num_embeddings, dim, dtype=dtype, device=device), requires_grad=False
        )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.embedding(ids, self.weight)
