"""The engine's KV cache and the tiers around it, set up once per engine (docs/kv-cache.md).

How many blocks the budget holds; whether the MSA layers' K/V pages live in the host-memory
tier (runner/host_kv_tier.py), forced on or off by `EngineConfig.kv_host_tier` or, left to
the engine (None), on exactly when the device's budget cannot hold one whole context: the
planner's rule (engine/offload/plan.py) applied to the budget the device really has once the
weights are loaded; and the disk tier below the cache (kvstore/), which with the host tier
reads and writes the host pool.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from ..kvstore.tiers import PageTiers
from ..runner.host_kv_tier import (
    HostKVTier,
    device_cache_bytes,
    device_resident_specs,
    host_tier_blocks,
)
from ..runner.kv_cache_allocator import allocate_caches, num_blocks_for_budget
from .attention_metadata import BLOCK_SIZE
from .engine_config import DEFAULT_CPU_KV_BYTES, GPU_FULL_CONTEXTS, EngineConfig
from .kv_cache_manager import cdiv
from .model_api import LayerCache, LayerCacheSpec, NativeModel

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WeightsId:
    """Which checkpoint the model's weights came from (kvstore.identity.weights_fingerprint)."""

    fingerprint: str
    name: str = ""  # its folder's name, a label


@dataclass(frozen=True, slots=True)
class CacheSetup:
    num_blocks: int
    caches: list[LayerCache]  # what the model runs with
    host_kv: HostKVTier | None  # the host-memory tier, when on
    host_tier_reason: str  # one line: why the tier is on or off
    page_tiers: PageTiers | None  # the tiers below the cache (the disk), when on


def host_tier_choice(
    mode: bool | None, device: torch.device, has_msa: bool, device_blocks: int, context_blocks: int
) -> tuple[bool, str]:
    """Whether the host-memory tier is on, and one line saying why. mode None (auto): on when
    the device's budget (`device_blocks`, the whole cache per block) holds less than one
    context of `context_blocks` (the null block included)."""
    if not has_msa:
        return False, "KV host tier off: the model has no sparse (MSA) layers"
    if mode is not None:
        return mode, f"KV host tier {'on' if mode else 'off'} (forced)"
    if device.type != "cuda":
        return False, "KV host tier off: on the CPU the whole KV cache is in host memory already"
    if device_blocks >= context_blocks:
        return False, (
            f"KV host tier off: the GPU holds the whole KV cache ({device_blocks} blocks of "
            f"{BLOCK_SIZE} tokens, {context_blocks} for one context)"
        )
    return True, (
        f"KV host tier on: the GPU holds {device_blocks} of the {context_blocks} blocks one "
        "context needs; the MSA layers' K/V pages go to host memory"
    )


def set_up_caches(
    config: EngineConfig,
    model: NativeModel,
    device: torch.device,
    wanted_len: int,
    weights: WeightsId | None,
) -> CacheSetup:
    specs = model.cache_specs()
    dtype = config.cache_dtype(model.info.dtype)
    whole_blocks = _num_blocks(config, device, specs, dtype, wanted_len)
    has_msa = any(s.index_dim > 0 for s in specs)
    on, reason = host_tier_choice(
        config.kv_host_tier, device, has_msa, whole_blocks, cdiv(wanted_len, BLOCK_SIZE) + 1
    )
    host_kv = None
    if on:
        # the device budget pays for the block caches first, then per block only for the
        # index keys and the dense layers' K/V; the host budget bounds the pools
        reserved = device_cache_bytes(specs, dtype, config.kv_device_blocks)
        num_blocks = _num_blocks(
            config, device, device_resident_specs(specs), dtype, wanted_len, reserved
        )
        if config.num_gpu_blocks is None:
            num_blocks = host_tier_blocks(specs, dtype, num_blocks, config.kv_host_memory_bytes)
        host_kv = HostKVTier(specs, num_blocks, config.kv_device_blocks, dtype, device)
        caches = host_kv.caches
    else:
        num_blocks = whole_blocks
        caches = allocate_caches(specs, num_blocks, dtype, device)
    if config.kv_host_tier is None or on:
        log.info("%s", reason)
    page_tiers = _page_tiers(config, model, device, specs, caches, host_kv, weights)
    return CacheSetup(num_blocks, caches, host_kv, reason, page_tiers)


def _num_blocks(
    cfg: EngineConfig,
    device: torch.device,
    specs: list[LayerCacheSpec],
    dtype: torch.dtype,
    max_len: int,
    reserved: int = 0,
) -> int:
    """reserved: bytes of the budget taken before the blocks (the host tier's caches)."""
    if cfg.num_gpu_blocks is not None:
        return cfg.num_gpu_blocks
    if cfg.kv_cache_memory_bytes is not None:
        return num_blocks_for_budget(specs, dtype, max(0, cfg.kv_cache_memory_bytes - reserved))
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        budget = max(0, int(free * cfg.gpu_memory_utilization) - reserved)
        # no more than GPU_FULL_CONTEXTS whole contexts: the rest stays free for others
        needed = cdiv(max_len, BLOCK_SIZE) * min(cfg.max_num_seqs, GPU_FULL_CONTEXTS) + 1
    else:
        budget = max(0, DEFAULT_CPU_KV_BYTES - reserved)
        # No point in zero-filling more host memory than the seqs could ever use.
        needed = cdiv(max_len, BLOCK_SIZE) * cfg.max_num_seqs + 1
    return max(2, min(num_blocks_for_budget(specs, dtype, budget), needed))


def _page_tiers(
    cfg: EngineConfig,
    model: NativeModel,
    device: torch.device,
    specs: list[LayerCacheSpec],
    caches: list[LayerCache],
    host_kv: HostKVTier | None,
    weights: WeightsId | None,
) -> PageTiers | None:
    """The tiers below the cache: the disk tier when configured and the weights are known.
    With the host tier, pages are copied out of and restored into its host pools (which are
    `caches`' K/V), and a restored block's stale device copies are dropped."""
    if cfg.kv_disk_dir is None or weights is None or not cfg.enable_prefix_caching:
        return None
    from ..kvstore.disk import DiskTier
    from ..kvstore.identity import ModelIdentity, engine_version

    cache_dtype = cfg.cache_dtype(model.info.dtype)
    identity = ModelIdentity(
        weights=weights.fingerprint,
        model_dtype=str(model.info.dtype).removeprefix("torch."),
        cache_dtype=str(cache_dtype).removeprefix("torch."),
        block_size=BLOCK_SIZE,
        layout=tuple((s.num_kv_heads, s.head_dim, s.index_dim) for s in specs),
        device=device.type,
        engine=engine_version(),
        name=weights.name,
    )
    disk = DiskTier(
        Path(cfg.kv_disk_dir), identity, cfg.kv_disk_bytes, PageTiers.payload_bytes(caches)
    )
    restored = None if host_kv is None else host_kv.invalidate
    return PageTiers(caches, [disk], on_restored=restored)
