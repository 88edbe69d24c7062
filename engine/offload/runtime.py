"""The offloaded MoE runtime of one model: host experts, the CPU worker, the hot-expert cache,
the prefill streamer, and the figures a benchmark or `stats()` reads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..m3.config import M3TextConfig
from ..native.layers.moe import MoE
from .cpu_experts import CpuExperts, HostExpertLayer
from .hot_cache import HotExperts, HotStats
from .offloaded_moe import OffloadedMoE
from .pinning import host_bytes, unpin
from .prefill_stream import PrefillStreamer

if TYPE_CHECKING:
    from .config import OffloadConfig


@dataclass(frozen=True, slots=True)
class OffloadStats:
    form: str
    layers: int
    host_bytes: int
    cpu_tokens: int  # tokens whose routed experts ran on the CPU (summed over layers)
    streamed_tokens: int  # tokens whose layer streamed its experts to the GPU
    bytes_streamed: int
    cpu_s: float  # seconds in the CPU step (worker thread), all layers
    moe_s: float  # seconds in the offloaded MoE blocks, all layers (CPU step overlapped)
    cpu_bytes: int  # expert weight bytes the CPU step read
    hot: HotStats | None


class OffloadRuntime:
    def __init__(
        self,
        layers: dict[int, HostExpertLayer],
        cfg: OffloadConfig,
        device: torch.device,
        config: M3TextConfig,
        pinned: list[torch.Tensor] | None = None,
    ) -> None:
        self.pinned = pinned if pinned is not None else []  # registered by placement.attach
        self.cfg = cfg
        self.layers = layers
        self.host_bytes = host_bytes(layers)
        self.device = device
        if cfg.cpu_threads is not None:
            torch.set_num_threads(cfg.cpu_threads)
        self.cpu = CpuExperts(
            layers,
            alpha=config.swiglu_alpha,
            limit=config.swiglu_limit,
            beta=config.swiglu_beta,
            use_kernel=cfg.cpu_kernel,
        )
        # one worker: the CPU step of a layer is itself multi-threaded inside torch
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="m3agent-cpu-experts")
        self.hot = (
            HotExperts(layers, cfg.hot_experts_per_layer, device)
            if cfg.hot_experts_per_layer > 0
            else None
        )
        self.stream = (
            PrefillStreamer(layers, device, cfg.stream_experts)
            if cfg.prefill_stream_tokens > 0 and layers
            else None
        )
        self.modules: dict[int, OffloadedMoE] = {}

    def wrap(self, moe: MoE, layer: int) -> OffloadedMoE:
        m = OffloadedMoE(
            moe, layer, self.cpu, self.pool, self.hot, self.stream, self.cfg.prefill_stream_tokens
        )
        self.modules[layer] = m
        return m

    def counts(self) -> dict[int, torch.Tensor]:
        return {i: m.counts for i, m in self.modules.items()}

    def between_requests(self) -> int:
        """Refreshes the hot-expert cache from the routing counts so far (the engine calls
        this when no request is running); returns the experts uploaded."""
        if self.hot is None:
            return 0
        return self.hot.refresh(self.counts())

    def stats(self) -> OffloadStats:
        return OffloadStats(
            form=str(self.cfg.form),
            layers=len(self.layers),
            host_bytes=self.host_bytes,
            cpu_tokens=sum(m.cpu_tokens for m in self.modules.values()),
            streamed_tokens=sum(m.streamed_tokens for m in self.modules.values()),
            bytes_streamed=self.stream.bytes_streamed if self.stream else 0,
            cpu_s=sum(m.cpu_s for m in self.modules.values()),
            moe_s=sum(m.moe_s for m in self.modules.values()),
            cpu_bytes=sum(m.cpu_bytes for m in self.modules.values()),
            hot=self.hot.stats() if self.hot else None,
        )

    def close(self) -> None:
        """Stops the worker and unpins the host experts (before their memory is freed)."""
        self.pool.shutdown(wait=True)
        if self.pinned:
            torch.cuda.synchronize(self.device)  # no copy may still read them
            unpin(self.pinned)
