"""Partial NeoX rotary embedding with optional YaRN scaling (SPEC §1.4).

The first `rotary_dim` channels of each head rotate in NeoX half-split layout
(x[:r/2] pairs with x[r/2:r]); the rest pass through. cos/sin are computed on the fly from the
step's positions in float64 (angles reach 1e6 rad at 1M tokens, where fp32 keeps ~0.06 rad),
so there is no table to size and any position the model accepts works.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ...m3.config import RopeScaling


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1.0 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_inv_freq(
    base_inv: torch.Tensor, rotary_dim: int, theta: float, rs: RopeScaling
) -> torch.Tensor:
    """Blend interpolated (/factor) and original frequencies with YaRN's linear ramp."""

    def correction_dim(num_rotations: float) -> float:
        return (
            rotary_dim
            * math.log(rs.original_max_position_embeddings / (num_rotations * 2 * math.pi))
        ) / (2 * math.log(theta))

    low = max(math.floor(correction_dim(rs.beta_fast)), 0)
    high: float = min(math.ceil(correction_dim(rs.beta_slow)), rotary_dim - 1)
    if low == high:
        high += 1e-3  # avoid a zero-width ramp
    half = rotary_dim // 2
    ramp = ((torch.arange(half, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    extrapolation = 1.0 - ramp  # 1 on high-frequency dims: keep them as trained
    return base_inv / rs.factor * (1 - extrapolation) + base_inv * extrapolation


def rotate_neox(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, head_dim], cos and sin [T, rotary_dim // 2] -> a rotated copy in x's dtype (the
    maths in fp32): the first rotary_dim channels in NeoX half-split layout, the rest as they
    are."""
    h = cos.shape[-1]
    xf = x.float()
    x1, x2 = xf[..., :h], xf[..., h : 2 * h]
    c, s = cos[:, None, :], sin[:, None, :]
    out = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, xf[..., 2 * h :]], dim=-1)
    return out.to(x.dtype)


class RotaryEmbedding(nn.Module):
    inv_freq: torch.Tensor  # a buffer: follows .to() (the per-device copies below do not)

    def __init__(
        self, head_dim: int, rotary_dim: int, theta: float, rope_scaling: RopeScaling | None = None
    ) -> None:
        super().__init__()
        if rotary_dim % 2 or rotary_dim > head_dim:
            raise ValueError(f"rotary_dim {rotary_dim} must be even and <= head_dim {head_dim}")
        self.head_dim = head_dim
        self.rotary_dim = rotary_dim
        inv = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
        self.mscale = 1.0
        if rope_scaling is not None and rope_scaling.factor > 1.0:
            inv = _yarn_inv_freq(inv, rotary_dim, theta, rope_scaling)
            if rope_scaling.attention_factor is not None:
                self.mscale = rope_scaling.attention_factor
            elif rope_scaling.mscale and rope_scaling.mscale_all_dim:
                self.mscale = _yarn_mscale(rope_scaling.factor, rope_scaling.mscale) / _yarn_mscale(
                    rope_scaling.factor, rope_scaling.mscale_all_dim
                )
            else:
                self.mscale = _yarn_mscale(rope_scaling.factor)
        self.register_buffer("inv_freq", inv, persistent=False)
        # per-device copies: a host-to-device copy on every step would also break CUDA-graph
        # capture (pageable memory)
        self._inv_on: dict[torch.device, torch.Tensor] = {}

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[T] positions -> cos, sin of shape [T, rotary_dim // 2], float32."""
        inv = self._inv_on.get(positions.device)
        if inv is None or inv.shape != self.inv_freq.shape:
            inv = self._inv_on[positions.device] = self.inv_freq.to(positions.device)
        ang = positions.to(torch.float64)[:, None] * inv[None, :]
        return ((torch.cos(ang) * self.mscale).float(), (torch.sin(ang) * self.mscale).float())

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [T, H, head_dim] -> rotated copy (input dtype); cos, sin from cos_sin."""
        return rotate_neox(x, cos, sin)

    def forward(self, positions: torch.Tensor, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        cos, sin = self.cos_sin(positions)
        return tuple(self.rotate(x, cos, sin) for x in xs)
