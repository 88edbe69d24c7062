"""M3's MoE router (SPEC §1.6) in plain torch: the reference of kernels/moe_router.py and the
CPU path."""

from __future__ import annotations

import torch


def route(
    logits: torch.Tensor, bias: torch.Tensor | None, top_k: int, scaling: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 router logits [T, E] -> (weights [T, k] fp32, expert ids [T, k] int64)."""
    scores = torch.sigmoid(logits.float())
    choice = scores if bias is None else scores + bias.float()[None, :]
    ids = torch.topk(choice, top_k, dim=-1).indices
    w = scores.gather(1, ids)  # the unbiased scores of the chosen experts
    w = w / w.sum(-1, keepdim=True)
    return w * scaling, ids
