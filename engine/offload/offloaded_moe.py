"""M3's MoE block with its routed experts in host memory (SPEC §1.6 semantics unchanged).

On the GPU: the router (fp32, correction bias for selection only), the shared expert and the
hot experts. On the CPU: the cold routed experts, through `CpuExperts.forward`. The two halves
of one layer overlap: the router's choice and the layer input go to pinned host buffers, a
worker thread runs the CPU experts while this thread queues the shared and hot experts on the
GPU, then the CPU's sum comes back with a non-blocking copy and is added.

Chunks of at least `stream_tokens` tokens (prefill) instead stream the layer's experts over
PCIe and compute them all on the GPU (prefill_stream.py).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

from ..native.layers.moe import MoE
from ..native.layers.router import route
from .cpu_experts import CpuExperts
from .hot_cache import HotExperts
from .prefill_stream import PrefillStreamer


def cpu_slots(
    ids: torch.Tensor, weights: torch.Tensor, hot: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The routing the CPU still computes once the hot slots are served by the GPU, or None.

    One row: the cold columns. Several rows (CpuExperts groups by expert, so a rectangle is
    needed): a hot slot takes weight 0 and an expert the CPU reads anyway (the row's first cold
    one, else any cold one of the batch), so it costs a row, not an expert's bytes."""
    if not hot.any():
        return ids, weights
    cold = ~hot
    if not cold.any():
        return None
    if ids.shape[0] == 1:
        keep = cold[0]
        return ids[:, keep], weights[:, keep]
    first = ids.gather(1, cold.to(torch.int8).argmax(1, keepdim=True))
    fallback = ids[cold][0]
    repl = torch.where(cold.any(1, keepdim=True), first, fallback)
    return torch.where(cold, ids, repl), torch.where(cold, weights, torch.zeros_like(weights))


class OffloadedMoE(nn.Module):
    def __init__(
        self,
        moe: MoE,
        layer: int,
        cpu: CpuExperts,
        pool: ThreadPoolExecutor,
        hot: HotExperts | None,
        stream: PrefillStreamer | None,
        stream_tokens: int,
    ) -> None:
        super().__init__()
        # the router and the shared expert stay where they were loaded (the GPU)
        self.gate = moe.gate
        self.e_score_correction_bias = moe.e_score_correction_bias
        self.shared_experts = moe.shared_experts
        self.top_k, self.scaling = moe.top_k, moe.scaling
        self.alpha, self.limit, self.beta = moe.alpha, moe.limit, moe.beta
        self.layer = layer
        # not `self.cpu`: that is nn.Module.cpu()
        self.cpu_experts, self.pool, self.hot, self.stream = cpu, pool, hot, stream
        self.stream_tokens = stream_tokens
        n = moe.gate.weight.shape[0]
        # routing counts of the run (what the hot cache is refreshed from); on the device so
        # counting never waits for it
        self.counts = torch.zeros(n, dtype=torch.int64, device=moe.gate.weight.device)
        self.cpu_tokens = 0
        self.streamed_tokens = 0
        # what a benchmark reads: seconds in the CPU step and in the whole block, bytes of
        # expert weights the CPU step read
        self.cpu_s = self.moe_s = 0.0
        self.cpu_bytes = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        out = self._forward(x)
        self.moe_s += time.perf_counter() - t0
        return out

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = torch.nn.functional.linear(x.float(), self.gate.weight)
        w, ids = route(logits, self.e_score_correction_bias, self.top_k, self.scaling)
        self.counts.index_add_(0, ids.flatten(), torch.ones_like(ids.flatten()))
        if self.stream is not None and x.shape[0] >= self.stream_tokens:
            self.streamed_tokens += x.shape[0]
            out = self.stream.forward(self.layer, x, ids, w, self.alpha, self.limit, self.beta)
            if self.shared_experts is not None:
                out += self.shared_experts(x).float()
            return out.to(x.dtype)
        self.cpu_tokens += x.shape[0]
        x_h, ids_h, w_h = _to_host(x), _to_host(ids), _to_host(w)
        if x.is_cuda:
            torch.cuda.current_stream(x.device).synchronize()  # the router's choice is needed
        hot = self.hot.is_hot[self.layer][ids_h] if self.hot is not None else None
        job = self.pool.submit(self._cpu, x_h, ids_h, w_h, hot)
        # meanwhile on the GPU: the shared expert and the hot experts
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        if self.shared_experts is not None:
            out += self.shared_experts(x).float()
        if self.hot is not None:
            y = self.hot.forward(self.layer, x, ids_h, w_h, self.alpha, self.limit, self.beta)
            if y is not None:
                out += y
        routed = job.result()
        if routed is not None:
            out += routed.to(x.device, non_blocking=True)
        return out.to(x.dtype)

    @torch.inference_mode()  # thread-local: the worker does not inherit the engine's mode
    def _cpu(
        self, x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor, hot: torch.Tensor | None
    ) -> torch.Tensor | None:
        t0 = time.perf_counter()
        sel = (ids, w) if hot is None else cpu_slots(ids, w, hot)
        if sel is None or sel[0].numel() == 0:
            return None
        y = self.cpu_experts.forward(self.layer, x, sel[0], sel[1])
        y = y.pin_memory() if torch.cuda.is_available() else y
        self.cpu_bytes += (
            torch.unique(sel[0]).numel() * self.cpu_experts.layers[self.layer].expert_bytes()
        )
        self.cpu_s += time.perf_counter() - t0
        return y


def _to_host(t: torch.Tensor) -> torch.Tensor:
    if not t.is_cuda:
        return t
    dst = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    return dst.copy_(t, non_blocking=True)
