"""What the engine runtime needs from a model (M3 or the Llama-style check model).

The runtime (scheduler, KV cache manager, model runner) knows models only through this
protocol; models know the runtime only through AttentionMetadata and their cache tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from .attention_metadata import AttentionMetadata


@dataclass(frozen=True, slots=True)
class LayerCacheSpec:
    num_kv_heads: int
    head_dim: int
    index_dim: int = 0  # > 0 for MSA layers: they also own an index-key cache


class HostPages(Protocol):
    """An MSA layer whose K/V pages live in host memory (runner/host_kv_tier.py): the model
    writes and attends through it instead of through `LayerCache.kv` directly."""

    def insert(
        self,
        k: torch.Tensor,
        v: torch.Tensor,
        slot_mapping: torch.Tensor,
        insert_op: Callable[..., None],
    ) -> None:
        """Writes this step's K/V into the host pages (and into their resident device copies
        with `insert_op`)."""
        ...

    def attend(
        self,
        q: torch.Tensor,
        sel: torch.Tensor,
        md: AttentionMetadata,
        scale: float,
        attention_op: Callable[..., torch.Tensor],
    ) -> torch.Tensor:
        """Sparse attention over the selected blocks `sel` [T, Hkv, K] (logical ids): they are
        made resident on the device first, then `attention_op` runs over the device copies."""
        ...


@dataclass(frozen=True, slots=True)
class LayerCache:
    kv: torch.Tensor  # [num_blocks, num_kv_heads, 128, 2 * head_dim]
    index: torch.Tensor | None = None  # [num_blocks, 128, index_dim] on MSA layers
    # Set on MSA layers when the host tier is on: then `kv` is the host pool (pinned when the
    # engine runs on CUDA), indexed by the same physical block ids.
    host: HostPages | None = None


@dataclass(frozen=True, slots=True)
class ModelInfo:
    architecture: str  # "minimax_m3" | "llama"
    vocab_size: int
    max_position_embeddings: int  # positions the model can really serve (YaRN included)
    eos_token_ids: tuple[int, ...]
    dtype: torch.dtype
    # The forward needs nothing from the host on a decode step, so the runner may capture it
    # in a CUDA graph (cuda_graphs.py).
    cuda_graphs: bool = False


class BetweenRequests(Protocol):
    """A model part with work to do between two requests, never inside a step (the offload
    runtime's hot-expert refresh, engine/offload/runtime.py)."""

    def between_requests(self) -> object: ...  # what it returns is for benchmarks


class NativeModel(Protocol):
    info: ModelInfo

    @property
    def offload(self) -> BetweenRequests | None:
        """The offload runtime once offload/placement.py moved the routed experts to host
        memory; None for a model whose weights are all its own."""
        ...

    def cache_specs(self) -> list[LayerCacheSpec]:
        """One spec per decoder layer, in order."""
        ...

    def forward(
        self,
        input_ids: torch.Tensor,  # [T] int64
        caches: list[LayerCache],
        md: AttentionMetadata,
    ) -> torch.Tensor:  # hidden states [T, hidden]
        ...

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:  # [N, vocab] float32
        ...
