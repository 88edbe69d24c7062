"""What the engine runtime needs from a model (M3 or the Llama-style check model).

The runtime (scheduler, KV cache manager, model runner) knows models only through this
protocol; models know the runtime only through AttentionMetadata and their cache tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from .attention_metadata import AttentionMetadata


@dataclass(frozen=True, slots=True)
class LayerCacheSpec:
    num_kv_heads: int
    head_dim: int
    index_dim: int = 0  # > 0 for MSA layers: they also own an index-key cache


@dataclass(frozen=True, slots=True)
class LayerCache:
    kv: torch.Tensor  # [num_blocks, num_kv_heads, 128, 2 * head_dim]
    index: torch.Tensor | None = None  # [num_blocks, 128, index_dim] on MSA layers


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
