"""Configuration of one LLMEngine; validated on construction, never mutated afterwards."""

from __future__ import annotations

from dataclasses import dataclass

import torch

DEFAULT_CPU_KV_BYTES = 512 * 1024 * 1024
DEFAULT_KV_DISK_BYTES = 32 << 30  # the disk tier's budget when a folder is given
# --kv-cache-dtype: "auto" stores K/V and index keys in the model dtype, "fp8" in e4m3
# (saturated at +-448, no scale), halving the cache and the bytes decode reads.
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3")


def require_at_least(name: str, value: int | None, low: int) -> None:
    """ValueError naming the setting when a given value is below `low` (None: not set)."""
    if value is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 64
    max_model_len: int | None = None  # None: the model's own maximum (capped by the cache)
    num_gpu_blocks: int | None = None  # overrides the memory budget (counts the null block)
    kv_cache_memory_bytes: int | None = None  # None: a share of free GPU memory, or 512 MiB on CPU
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    device: str = "cpu"
    keep_logits: bool = False  # keep each sampled step's logits (tests and debugging)
    kv_cache_dtype: str = "auto"  # one of KV_CACHE_DTYPES
    enforce_eager: bool = False  # True: no CUDA graphs for decode steps
    max_graph_batch: int = 64  # decode batches above this run eagerly
    # The disk tier for finished prefixes (kvstore/, docs/kv-cache.md): a folder shared by
    # every engine of this user (None: off), and its size budget over all models (LRU).
    kv_disk_dir: str | None = None
    kv_disk_bytes: int = DEFAULT_KV_DISK_BYTES
    # The host-memory tier (runner/host_kv_tier.py): MSA layers' K/V pages in host memory,
    # the selected blocks fetched per step into a device cache of kv_device_blocks blocks per
    # MSA layer. Decode steps then run eagerly (no CUDA graphs). None: the engine decides, on
    # when the device's budget does not hold one whole context (core/cache_setup.py).
    kv_host_tier: bool | None = False
    kv_device_blocks: int = 128
    kv_host_memory_bytes: int | None = None  # the host pools' budget; None: half the free RAM

    def cache_dtype(self, model_dtype: torch.dtype) -> torch.dtype:
        return model_dtype if self.kv_cache_dtype == "auto" else torch.float8_e4m3fn

    def __post_init__(self) -> None:
        require_at_least("max_num_batched_tokens", self.max_num_batched_tokens, 1)
        require_at_least("max_num_seqs", self.max_num_seqs, 1)
        require_at_least("max_model_len", self.max_model_len, 2)
        require_at_least("num_gpu_blocks", self.num_gpu_blocks, 2)
        for name in ("kv_cache_memory_bytes", "kv_host_memory_bytes"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(
                f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, "
                f"got {self.kv_cache_dtype!r}"
            )
        require_at_least("max_graph_batch", self.max_graph_batch, 1)
        require_at_least("kv_disk_bytes", self.kv_disk_bytes, 1)
        require_at_least("kv_device_blocks", self.kv_device_blocks, 1)
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )


# What the chat backends (run, serve, the TUI) ask of a GPU: prefill chunks of the plan's
# workspace size (engine/offload/plan.py), so a 500K-token snapshot is 61 steps rather than
# 244, each streaming an offloaded layer's experts once; and a KV cache of at most this many
# whole contexts (more short sequences share it), so a small model does not take the card.
GPU_PREFILL_CHUNK = 8192
GPU_FULL_CONTEXTS = 4


def serving_config(
    device: str, gpu_memory_utilization: float = 0.9, kv_host_tier: bool | None = None
) -> EngineConfig:
    """The engine configuration of the chat backends on `device` (kv_host_tier None: on
    when the KV cache does not fit the device)."""
    if device.startswith("cuda"):
        return EngineConfig(
            device=device,
            max_num_batched_tokens=GPU_PREFILL_CHUNK,
            gpu_memory_utilization=gpu_memory_utilization,
            kv_host_tier=kv_host_tier,
        )
    return EngineConfig(device=device, kv_host_tier=kv_host_tier)
