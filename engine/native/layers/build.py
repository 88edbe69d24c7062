"""What every module of a model is built with: where its weights live (dtype, device) and the
op table, resolved once for the model (op_table.py). A model makes one and hands it down to
each layer, instead of the three or four arguments each layer would pass on again."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .linear import Placement
from .op_table import OpTable, resolve_ops


@dataclass(frozen=True, slots=True)
class Build:
    dtype: torch.dtype
    device: torch.device | str
    ops: OpTable
    # M3's routed experts, when they live apart from the rest (host memory: engine/offload)
    experts_device: torch.device | str | None = None

    @classmethod
    def resolve(
        cls,
        dtype: torch.dtype,
        device: torch.device | str,
        experts_device: torch.device | str | None = None,
    ) -> Build:
        """Triton ops or torch references, chosen once for this device and dtype."""
        return cls(dtype, device, resolve_ops(device, dtype), experts_device)

    @property
    def placement(self) -> Placement:
        """dtype and device, as the keyword arguments of Linear, Embedding and the norms."""
        return {"dtype": self.dtype, "device": self.device}
