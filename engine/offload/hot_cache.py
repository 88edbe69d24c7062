"""A GPU cache of hot routed experts, chosen from the run's own routing counts.

Each MoE layer gets `per_layer` slots on the GPU holding experts in the compute form (bf16,
dequantised once when the expert is uploaded: device_experts.compute_weights), so a hit costs
two GEMMs over its weights and nothing else. Between requests the engine calls `refresh()`: per
layer, the experts routed to most often so far take the slots (ties go to the lower id, so a
refresh with no new counts changes nothing). A decode step computes its hot slots on the GPU
and leaves only the cold ones to the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .cpu_experts import HostExpertLayer
from .device_experts import add_expert, compute_weights, empty_slots

BF16 = torch.bfloat16


@dataclass(frozen=True, slots=True)
class HotStats:
    lookups: int  # routed (token, expert) slots seen by the offloaded layers
    hits: int  # of them served by a hot expert on the GPU
    refreshes: int
    uploads: int  # experts copied into the cache by refreshes

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0


class HotExperts:
    def __init__(
        self,
        layers: dict[int, HostExpertLayer],
        per_layer: int,
        device: torch.device,
    ) -> None:
        self.per_layer = per_layer
        self.device = device
        self.host = layers
        self.w13: dict[int, torch.Tensor] = {}  # layer -> [slots, 2I, h] bf16
        self.w2: dict[int, torch.Tensor] = {}  # layer -> [slots, h, I] bf16
        # one expert in the host form on the device: what an upload copies before dequantising
        self.staging: dict[int, dict[str, torch.Tensor]] = {}
        self.resident: dict[int, list[int]] = {}  # layer -> expert id in each slot (-1 free)
        self.is_hot: dict[int, torch.Tensor] = {}  # layer -> bool [E] on the host
        for i, L in layers.items():
            n = min(per_layer, L.num_experts)
            self.w13[i] = torch.empty((n, 2 * L.inter, L.hidden), dtype=BF16, device=device)
            self.w2[i] = torch.empty((n, L.hidden, L.inter), dtype=BF16, device=device)
            self.staging[i] = empty_slots(L, 1, device) if n else {}
            self.resident[i] = [-1] * n
            self.is_hot[i] = torch.zeros(L.num_experts, dtype=torch.bool)
        self.lookups = self.hits = self.refreshes = self.uploads = 0

    def slot_of(self, layer: int, expert: int) -> int:
        return self.resident[layer].index(expert)

    def refresh(self, counts: dict[int, torch.Tensor]) -> int:
        """Puts each layer's most-routed experts in its slots; returns experts uploaded."""
        uploaded = 0
        for i, c in counts.items():
            n = len(self.resident[i])
            if n == 0:
                continue
            c = c.to("cpu", torch.int64)
            # stable order: count descending, then id ascending
            order = sorted(range(c.numel()), key=lambda e: (-int(c[e]), e))
            want = set(order[:n])
            have = self.resident[i]
            free = [s for s, e in enumerate(have) if e not in want]
            for e in (e for e in order[:n] if e not in have):
                s = free.pop(0)
                self._upload(i, e, s)
                have[s] = e
                uploaded += 1
            hot = torch.zeros_like(self.is_hot[i])
            hot[[e for e in have if e >= 0]] = True
            self.is_hot[i] = hot
        self.refreshes += 1
        self.uploads += uploaded
        return uploaded

    def _upload(self, layer: int, expert: int, slot: int) -> None:
        stage, host = self.staging[layer], self.host[layer]
        for k, dst in stage.items():
            dst[0].copy_(getattr(host, k)[expert], non_blocking=True)
        w13, w2 = compute_weights(host.form, stage, 0)
        self.w13[layer][slot].copy_(w13)
        self.w2[layer][slot].copy_(w2)

    def forward(
        self,
        layer: int,
        x: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        alpha: float,
        limit: float,
        beta: float,
    ) -> torch.Tensor | None:
        """The hot slots' share of the routed sum on the GPU, [T, h] fp32, or None when no
        chosen expert is hot. ids/weights are host tensors (the CPU step has them already)."""
        hot = self.is_hot[layer][ids]
        self.lookups += ids.numel()
        n_hot = int(hot.sum())
        self.hits += n_hot
        if n_hot == 0:
            return None
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        w13, w2 = self.w13[layer], self.w2[layer]
        for e in torch.unique(ids[hot]).tolist():
            s = self.slot_of(layer, e)
            add_expert(out, x, ids, weights, e, w13[s], w2[s], alpha, limit, beta)
        return out

    def stats(self) -> HotStats:
        return HotStats(self.lookups, self.hits, self.refreshes, self.uploads)
