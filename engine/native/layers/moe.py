"""M3's MoE block (SPEC §1.6): fp32 sigmoid router, correction bias for selection only,
renormalised top-k weights times routed_scaling_factor, plus an unscaled shared expert.

Checkpoint names: block_sparse_moe.gate.weight, .e_score_correction_bias,
.experts.{e}.w1 (gate) / .w3 (up) / .w2 (down), .shared_experts.{gate,up,down}_proj.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
from torch import nn

from .linear import FusedLayer
from .mlp import SwigluArgs, SwigluOAIMLP
from .op_table import OpTable, resolve_ops
from .router import route


def routed_sum(
    x: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    expert: Callable[[int, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """x [T, H], the router's ids and weights [T, k] -> sum over k of weight x expert(id, x)
    as [T, H] fp32, one expert at a time over the tokens routed to it: the MoE's CPU path,
    and (over dequantised weights) the grouped kernel's reference."""
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in torch.unique(ids).tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        y = expert(e, x[tok]).float()
        out.index_add_(0, tok, y * weights[tok, slot].float()[:, None])
    return out


class _Gate(nn.Module):
    """The router's weight under the checkpoint's name (block_sparse_moe.gate.weight)."""

    def __init__(self, weight: nn.Parameter) -> None:
        super().__init__()
        self.weight = weight


class MoE(nn.Module, FusedLayer):
    def __init__(
        self,
        hidden: int,
        inter: int,
        num_experts: int,
        top_k: int,
        n_shared: int,
        routed_scaling_factor: float,
        use_bias: bool,
        *,
        alpha: float,
        limit: float,
        beta: float,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
        experts_device: torch.device | str | None = None,
        ops: OpTable | None = None,
    ) -> None:
        super().__init__()
        # experts_device "meta": the routed experts get no memory here; the offload path
        # (engine/offload/placement.py) holds them in host memory instead.
        edev = device if experts_device is None else experts_device
        self.ops = ops or resolve_ops(device, dtype)
        # the routed experts' ops are those of the device that holds them
        expert_ops = self.ops if experts_device is None else resolve_ops(edev, dtype)
        self.top_k = top_k
        self.scaling = routed_scaling_factor
        # The router stays fp32 whatever the model dtype (vLLM's GateLinear).
        self.gate = _Gate(
            nn.Parameter(
                torch.empty(num_experts, hidden, dtype=torch.float32, device=device),
                requires_grad=False,
            )
        )
        self.e_score_correction_bias: nn.Parameter | None = None
        if use_bias:
            self.e_score_correction_bias = nn.Parameter(
                torch.zeros(num_experts, dtype=torch.float32, device=device), requires_grad=False
            )
        kw: SwigluArgs = {
            "alpha": alpha,
            "limit": limit,
            "beta": beta,
            "dtype": dtype,
            "device": device,
        }
        ekw: SwigluArgs = {**kw, "device": edev}
        experts = [
            SwigluOAIMLP(hidden, inter, names=("w1", "w3", "w2"), ops=expert_ops, **ekw)
            for _ in range(num_experts)
        ]
        self.experts = nn.ModuleList(experts)
        self.shared_experts = (
            SwigluOAIMLP(hidden, inter * n_shared, ops=self.ops, **kw) if n_shared > 0 else None
        )
        self.expert_ops = expert_ops  # the grouped kernel reads the stacked weights below
        self.alpha, self.limit, self.beta = alpha, limit, beta
        # All experts' weights stacked, [E, 2I, H] (gate | up) and [E, H, I], for the grouped
        # kernel (kernels/moe_grouped.py); each expert's checkpoint-named Linears are views.
        self._w13 = torch.empty(num_experts, 2 * inter, hidden, dtype=dtype, device=edev)
        self._w2 = torch.empty(num_experts, hidden, inter, dtype=dtype, device=edev)
        for e, ex in enumerate(experts):
            ex._gate_up.weight = self._w13[e]
            w1, w3, w2 = ex.projections()
            w1.weight = nn.Parameter(self._w13[e, :inter], requires_grad=False)
            w3.weight = nn.Parameter(self._w13[e, inter:], requires_grad=False)
            w2.weight = nn.Parameter(self._w2[e], requires_grad=False)
            ex.finalize()  # its gate|up views moved into the stack
        self._grouped: Callable[..., torch.Tensor] | None = None  # chosen by finalize
        self.finalize()

    def finalize(self) -> None:
        """Keeps the grouped kernel of the experts' device when there is one and the experts'
        Linears are still views of the stacked weights (it reads those); None: the per-expert
        loop, through each expert's own body."""
        op = self.expert_ops.grouped_moe
        self._grouped = op if op is not None and self._stacked_intact() else None

    def _stacked_intact(self) -> bool:
        """The first and last experts' views still point into _w13 / _w2 (model.to() or a
        replaced parameter gives them storage of their own)."""
        first_w1 = cast(SwigluOAIMLP, self.experts[0]).projections()[0]
        _, last_w3, last_w2 = cast(SwigluOAIMLP, self.experts[-1]).projections()
        half = self._w13.shape[1] // 2
        return (
            first_w1.weight.data_ptr() == self._w13.data_ptr()
            and last_w2.weight.data_ptr() == self._w2[-1].data_ptr()
            and last_w3.weight.data_ptr() == self._w13[-1, half:].data_ptr()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = torch.nn.functional.linear(x.float(), self.gate.weight)
        grouped = self._grouped if x.dim() == 2 else None
        if grouped is not None:
            w, ids = self.ops.route(logits, self.e_score_correction_bias, self.top_k, self.scaling)
            out = grouped(x, self._w13, self._w2, w, ids, self.alpha, self.limit, self.beta)
            if self.shared_experts is not None:
                out += self.shared_experts(x).float()
            return out.to(x.dtype)
        w, ids = route(logits, self.e_score_correction_bias, self.top_k, self.scaling)
        out = routed_sum(x, ids, w, lambda e, xs: self.experts[e](xs))
        if self.shared_experts is not None:
            out += self.shared_experts(x).float()
        return out.to(x.dtype)
