"""The host-memory tier of MSA's K/V pages (docs/kv-cache.md, "Host-memory tier").

An MSA layer reads only the blocks its index selected (SPEC §2.4: 16 blocks of 128 tokens per
query and KV head), so its K/V pages need not live on the device. With the tier on:

* every MSA layer's K/V pages live in a host pool (`LayerCache.kv`, pinned when the engine runs
  on CUDA), indexed by the physical block ids the KV cache manager hands out; the index keys,
  which score every visible block each step, stay on the device, and so does the whole cache
  of the dense layers;
* each step writes its new K/V into the host pool (prefill chunks are written out as they
  are computed) and into any device copy of the same block, so a copy is never stale;
* after index selection, the selected blocks (the local block is always among them) are made
  resident in a small per-layer device cache of recently selected blocks (least recently used
  evicted), and the attention runs over that cache with the block table remapped to its slots.

Rows whose blocks do not fit the device cache together are attended in smaller groups of rows;
one query's selection (KV heads x top-k blocks) must fit, or `attend` raises.

Torch ops only: `index_select` into a pinned staging buffer and one non-blocking copy per
fetch. Overlapping the fetch with the next layer's index scoring is the GPU's next step.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from ..core.attention_metadata import BLOCK_SIZE, AttentionMetadata
from ..core.model_api import LayerCache, LayerCacheSpec
from ..layers.attention import insert_kv
from .kv_cache_allocator import bytes_per_block


@dataclass(slots=True)
class TierStats:
    """What the tier did so far, summed over its layers."""

    blocks_fetched: int = 0  # blocks copied host -> device cache
    cache_hits: int = 0  # selected blocks already resident
    bytes_fetched: int = 0
    attend_calls: int = 0  # attention op calls (more than layers x steps: rows were split)


@dataclass(slots=True)
class HostKVLayer:
    """One MSA layer's host pool and device block cache (implements model_api.HostPages)."""

    pool: torch.Tensor  # [num_blocks, Hkv, 128, 2D] on the host
    blocks: torch.Tensor  # [cache_blocks, Hkv, 128, 2D] on the device
    stats: TierStats
    # physical block -> device slot, least recently used first
    _slot_of: OrderedDict[int, int] = field(default_factory=OrderedDict)
    _where: torch.Tensor = field(init=False)  # [num_blocks] int64 host: slot or -1
    _free: list[int] = field(init=False)
    _staging: torch.Tensor | None = field(init=False, default=None)
    _copied: torch.cuda.Event | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._where = torch.full((self.pool.shape[0],), -1, dtype=torch.int64)
        self._free = list(range(self.blocks.shape[0] - 1, -1, -1))

    @property
    def capacity(self) -> int:
        return int(self.blocks.shape[0])

    def resident(self) -> list[int]:
        """The physical blocks on the device, least recently used first."""
        return list(self._slot_of)

    def invalidate(self, block_ids: list[int]) -> None:
        """Drops device copies of blocks written behind the tier's back (a page restored
        into the host pool by another tier)."""
        for b in block_ids:
            slot = self._slot_of.pop(b, None)
            if slot is not None:
                self._where[b] = -1
                self._free.append(slot)

    # ---- writes -----------------------------------------------------------------------

    def insert(
        self,
        k: torch.Tensor,
        v: torch.Tensor,
        slot_mapping: torch.Tensor,
        insert_op: Callable[..., None],
    ) -> None:
        slots = slot_mapping.to("cpu", torch.int64)
        host = self.pool.device
        insert_kv(k.to(host), v.to(host), self.pool, slots)
        if not self._slot_of:
            return
        keep = slots >= 0
        dev = self._where[torch.where(keep, slots, 0) // BLOCK_SIZE]
        dev_slots = torch.where(keep & (dev >= 0), dev * BLOCK_SIZE + slots % BLOCK_SIZE, -1)
        if bool((dev_slots >= 0).any()):
            insert_op(k, v, self.blocks, dev_slots.to(self.blocks.device))

    # ---- residency --------------------------------------------------------------------

    def ensure_resident(self, physical: torch.Tensor) -> torch.Tensor:
        """physical [n] distinct host block ids (n <= capacity) -> their device slots [n]
        (int64, host): hits are refreshed, misses evict the least recently used others."""
        ids = physical.tolist()
        if len(ids) > self.capacity:
            raise ValueError(f"{len(ids)} blocks asked of a device cache of {self.capacity}")
        need = set(ids)
        misses = []
        for b in ids:
            if b in self._slot_of:
                self._slot_of.move_to_end(b)
            else:
                misses.append(b)
        self.stats.cache_hits += len(ids) - len(misses)
        if misses:
            slots = []
            for b in misses:
                if not self._free:
                    old = next(x for x in self._slot_of if x not in need)
                    self._free.append(self._slot_of.pop(old))
                    self._where[old] = -1
                slot = self._free.pop()
                self._slot_of[b] = slot
                self._where[b] = slot
                slots.append(slot)
            self._fetch(misses, slots)
        return self._where[physical]

    def _fetch(self, ids: list[int], slots: list[int]) -> None:
        # as bytes: index_select / index_copy_ have no fp8 kernels on every device
        n = len(ids)
        src = torch.tensor(ids, dtype=torch.int64)
        dst = torch.tensor(slots, dtype=torch.int64, device=self.blocks.device)
        pool, blocks = self.pool.view(torch.uint8), self.blocks.view(torch.uint8)
        if blocks.device.type == "cuda":
            if self._staging is None:
                self._staging = torch.empty(
                    (self.capacity, *pool.shape[1:]), dtype=torch.uint8, pin_memory=True
                )
            if self._copied is not None:
                self._copied.synchronize()  # the staging buffer's last copy has left
            staged = torch.index_select(pool, 0, src, out=self._staging[:n])
            blocks.index_copy_(0, dst, staged.to(blocks.device, non_blocking=True))
            self._copied = torch.cuda.Event()
            self._copied.record()
        else:
            blocks.index_copy_(0, dst, pool.index_select(0, src))
        self.stats.blocks_fetched += n
        self.stats.bytes_fetched += n * self.pool[0].nbytes

    # ---- attention --------------------------------------------------------------------

    def attend(
        self,
        q: torch.Tensor,
        sel: torch.Tensor,
        md: AttentionMetadata,
        scale: float,
        attention_op: Callable[..., torch.Tensor],
    ) -> torch.Tensor:
        rows = _RowBlocks(sel, md)
        out = torch.empty_like(q)
        pending = [(0, md.num_tokens)]
        while pending:
            a, b = pending.pop()
            need = rows.physical_union(a, b)
            if need.numel() > self.capacity:
                if b - a == 1:
                    raise ValueError(
                        f"one query selects {need.numel()} blocks but the host tier's device "
                        f"cache holds {self.capacity} per layer: raise kv_device_blocks"
                    )
                mid = (a + b) // 2
                pending += [(mid, b), (a, mid)]
                continue
            slots = self.ensure_resident(need)
            sub = rows.remapped(a, b, need, slots, self.blocks.device)
            out[a:b] = attention_op(q[a:b], self.blocks, sel[a:b], sub, scale)
            self.stats.attend_calls += 1
        return out


class _RowBlocks:
    """The physical blocks each query row selected, and the metadata of a range of rows
    with its block table remapped to device-cache slots."""

    def __init__(self, sel: torch.Tensor, md: AttentionMetadata) -> None:
        self.md = md
        qlens = torch.tensor(md.query_lens_cpu, dtype=torch.int64)
        self.req = torch.repeat_interleave(torch.arange(len(qlens)), qlens)  # [T]
        self.pos = md.positions.to("cpu", torch.int64)
        self.sel = sel.to("cpu", torch.int64)  # [T, Hkv, K] logical block ids
        nb = torch.tensor([-(-s // BLOCK_SIZE) for s in md.seq_lens_cpu], dtype=torch.int64)
        nvis = (self.pos // BLOCK_SIZE + 1)[:, None, None]
        self.valid = (self.sel >= 0) & (self.sel < nvis) & (self.sel < nb[self.req][:, None, None])
        table = md.block_tables.to("cpu", torch.int64)
        logical = torch.where(self.valid, self.sel, 0)
        phys = table[self.req[:, None, None].expand_as(logical), logical]
        self.phys = torch.where(self.valid, phys, -1)

    def physical_union(self, a: int, b: int) -> torch.Tensor:
        p = self.phys[a:b]
        union: torch.Tensor = torch.unique(p[p >= 0])  # sorted
        return union

    def remapped(
        self, a: int, b: int, need: torch.Tensor, slots: torch.Tensor, device: torch.device
    ) -> AttentionMetadata:
        md = self.md
        req = self.req[a:b]
        first = int(req[0])
        local = req - first
        nreq = int(req[-1]) - first + 1
        # every entry points at some resident slot (finite data); the selected ones at theirs
        width = md.block_tables.shape[1]
        default = int(slots[0]) if slots.numel() else 0
        table = torch.full((nreq, width), default, dtype=torch.int64)
        v = self.valid[a:b]
        idx = torch.searchsorted(need, self.phys[a:b][v])
        table[local[:, None, None].expand_as(v)[v], self.sel[a:b][v]] = slots[idx]
        table_dev = table.to(device, torch.int32)
        if (a, b) == (0, md.num_tokens):
            return replace(md, block_tables=table_dev)
        # a range of rows: each request's part starts at its first row's position
        pos = self.pos[a:b]
        qlens = torch.bincount(local, minlength=nreq).tolist()
        starts = [0, *torch.cumsum(torch.tensor(qlens), 0).tolist()]
        ctx = [int(pos[s]) for s in starts[:-1]]
        seq = [c + n for c, n in zip(ctx, qlens, strict=True)]
        whole = [
            qlens[i] == md.query_lens_cpu[first + i] and first + i < md.num_decodes
            for i in range(nreq)
        ]
        num_decodes = next((i for i, w in enumerate(whole) if not w), nreq)

        def i32(x: list[int]) -> torch.Tensor:
            return torch.tensor(x, dtype=torch.int32, device=device)

        return replace(
            md,
            positions=md.positions[a:b],
            slot_mapping=md.slot_mapping[a:b],
            query_start_loc=i32(starts),
            seq_lens=i32(seq),
            context_lens=i32(ctx),
            block_tables=table_dev,
            query_lens_cpu=tuple(qlens),
            seq_lens_cpu=tuple(seq),
            context_lens_cpu=tuple(ctx),
            num_decodes=num_decodes,
        )


def device_resident_specs(specs: list[LayerCacheSpec]) -> list[LayerCacheSpec]:
    """What the device keeps per block with the tier on: the MSA layers' index keys and the
    dense layers' K/V (sizing the device budget in blocks)."""
    return [LayerCacheSpec(0, s.head_dim, s.index_dim) if s.index_dim > 0 else s for s in specs]


def device_cache_bytes(specs: list[LayerCacheSpec], dtype: torch.dtype, cache_blocks: int) -> int:
    """The device block caches of every MSA layer, taken from the device budget first."""
    msa_kv = [LayerCacheSpec(s.num_kv_heads, s.head_dim) for s in specs if s.index_dim > 0]
    return cache_blocks * bytes_per_block(msa_kv, dtype) if msa_kv else 0


def host_tier_blocks(
    specs: list[LayerCacheSpec], dtype: torch.dtype, device_blocks: int, host_budget: int | None
) -> int:
    """The blocks of a host-tier engine: as many as the device budget allows (`device_blocks`,
    from device_resident_specs), no more than the host pools' budget holds (None: half of the
    host's free memory)."""
    msa_kv = [LayerCacheSpec(s.num_kv_heads, s.head_dim) for s in specs if s.index_dim > 0]
    if not msa_kv:
        return device_blocks
    if host_budget is None:
        host_budget = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    return max(2, min(device_blocks, host_budget // bytes_per_block(msa_kv, dtype)))


class HostKVTier:
    """Owns every MSA layer's host pool and device block cache; dense layers stay whole on
    the device. `caches` is what the model runs with."""

    def __init__(
        self,
        specs: list[LayerCacheSpec],
        num_blocks: int,
        cache_blocks: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.stats = TierStats()
        self.layers: list[HostKVLayer] = []
        pin = device.type == "cuda"
        caches = []
        for s in specs:
            shape = (s.num_kv_heads, BLOCK_SIZE, 2 * s.head_dim)
            if s.index_dim == 0:
                kv = torch.zeros(num_blocks, *shape, dtype=dtype, device=device)
                caches.append(LayerCache(kv=kv))
                continue
            pool = torch.zeros(num_blocks, *shape, dtype=dtype, pin_memory=pin)
            blocks = torch.zeros(cache_blocks, *shape, dtype=dtype, device=device)
            layer = HostKVLayer(pool, blocks, self.stats)
            index = torch.zeros(num_blocks, BLOCK_SIZE, s.index_dim, dtype=dtype, device=device)
            self.layers.append(layer)
            caches.append(LayerCache(kv=pool, index=index, host=layer))
        self.caches = caches

    def invalidate(self, block_ids: list[int]) -> None:
        for layer in self.layers:
            layer.invalidate(block_ids)
