"""Prefill with the routed experts in host memory: stream each layer's experts to the GPU.

A long prefill chunk routes its tokens to nearly every expert of a layer, so reading them on
the CPU costs the whole layer at host bandwidth and CPU FLOPs; moving them over PCIe once and
computing on the GPU is faster above a few hundred tokens (`OffloadConfig.prefill_stream_tokens`).

Experts move in groups of `group` through two GPU buffers: while group g computes in one, group
g+1 copies into the other on a copy stream (host tensors pinned: asynchronous DMA). After a
layer's last group the first group of the next offloaded layer starts copying, so that copy
overlaps the next layer's attention. On a machine without CUDA the "GPU" is the CPU device and
the copies are plain, in order: the same code path, tested in CI.
"""

from __future__ import annotations

import torch

from .cpu_experts import HostExpertLayer
from .device_experts import add_expert, compute_weights, empty_slots, tensor_fields


class PrefillStreamer:
    def __init__(self, layers: dict[int, HostExpertLayer], device: torch.device, group: int):
        if group < 1:
            raise ValueError(f"stream group must be >= 1 expert, got {group}")
        self.host = layers
        self.order = sorted(layers)
        self.device = device
        first = layers[self.order[0]]
        self.group = min(group, max(L.num_experts for L in layers.values()))
        self.bufs = [empty_slots(first, self.group, device) for _ in range(2)]
        cuda = device.type == "cuda"
        self.copy_stream = torch.cuda.Stream(device) if cuda else None
        self.copied = [torch.cuda.Event() if cuda else None for _ in range(2)]
        self.freed = [torch.cuda.Event() if cuda else None for _ in range(2)]
        self.pending: tuple[int, int, int] | None = None  # (layer, group index, buffer)
        self.next_buf = 0
        self.bytes_streamed = 0

    def _groups(self, layer: int) -> int:
        return -(-self.host[layer].num_experts // self.group)

    def _start(self, layer: int, g: int) -> int:
        """Starts copying group g of `layer` into the free buffer; returns the buffer."""
        b = self.next_buf
        self.next_buf ^= 1
        lo = g * self.group
        hi = min(lo + self.group, self.host[layer].num_experts)
        src = tensor_fields(self.host[layer])
        freed, copied = self.freed[b], self.copied[b]
        if self.copy_stream is not None and freed is not None and copied is not None:
            # the buffer is free once the compute that last read it has run
            self.copy_stream.wait_event(freed)
            with torch.cuda.stream(self.copy_stream):
                for k, dst in self.bufs[b].items():
                    dst[: hi - lo].copy_(src[k][lo:hi], non_blocking=True)
                copied.record(self.copy_stream)
        else:
            for k, dst in self.bufs[b].items():
                dst[: hi - lo].copy_(src[k][lo:hi])
        self.bytes_streamed += sum(v[lo:hi].numel() * v.element_size() for v in src.values())
        return b

    def _next_after(self, layer: int) -> int:
        i = self.order.index(layer)
        return self.order[(i + 1) % len(self.order)]

    def forward(
        self,
        layer: int,
        x: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        alpha: float,
        limit: float,
        beta: float,
    ) -> torch.Tensor:
        """Routed sum [T, h] fp32 on x's device, every expert of `layer` streamed once."""
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        ids_h = ids.cpu()  # which experts got tokens: a prefill step can afford this sync
        form = self.host[layer].form
        n_groups = self._groups(layer)
        if self.pending is not None and self.pending[:2] == (layer, 0):
            b = self.pending[2]
        else:
            b = self._start(layer, 0)
        self.pending = None
        for g in range(n_groups):
            nb = self._start(layer, g + 1) if g + 1 < n_groups else None
            if nb is None:
                nxt = self._next_after(layer)
                self.pending = (nxt, 0, self._start(nxt, 0))
            copied = self.copied[b]
            if copied is not None:
                torch.cuda.current_stream(self.device).wait_event(copied)
            lo = g * self.group
            hi = min(lo + self.group, self.host[layer].num_experts)
            present = torch.unique(ids_h[(ids_h >= lo) & (ids_h < hi)]).tolist()
            for e in present:
                w13, w2 = compute_weights(form, self.bufs[b], e - lo)
                add_expert(out, x, ids, weights, e, w13, w2, alpha, limit, beta)
            freed = self.freed[b]
            if freed is not None:
                freed.record(torch.cuda.current_stream(self.device))
            if nb is not None:
                b = nb
        return out
