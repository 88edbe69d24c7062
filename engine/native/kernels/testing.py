"""Synthetic paged batches for the kernel tests and benchmarks: shuffled physical pages,
random data everywhere (garbage in unused slots too), metadata built the engine's way."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.attention_metadata import BLOCK_SIZE, AttentionMetadata


@dataclass(frozen=True, slots=True)
class PagedBatch:
    md: AttentionMetadata
    kv_cache: torch.Tensor
    index_cache: torch.Tensor


def make_metadata(
    seq_lens: list[int],
    query_lens: list[int],
    device: torch.device | str,
    generator: torch.Generator,
    num_pages: int | None = None,
    num_decodes: int = 0,
    decode_query_len: int = 1,
) -> AttentionMetadata:
    if len(seq_lens) != len(query_lens) or any(
        q > s for q, s in zip(query_lens, seq_lens, strict=True)
    ):
        raise ValueError("query_lens must pair with seq_lens and never exceed them")
    nblk = [(s + BLOCK_SIZE - 1) // BLOCK_SIZE for s in seq_lens]
    total = sum(nblk)
    num_pages = num_pages or total + 3
    perm = torch.randperm(num_pages, generator=generator)[:total]
    max_blocks = max(nblk)
    bt = torch.zeros((len(seq_lens), max_blocks), dtype=torch.int32)
    ctx = [s - q for s, q in zip(seq_lens, query_lens, strict=True)]
    positions, slots = [], []
    used = 0
    for r, n in enumerate(nblk):
        bt[r, :n] = perm[used : used + n].to(torch.int32)
        used += n
        pos = torch.arange(ctx[r], seq_lens[r])
        positions.append(pos)
        slots.append(bt[r, pos // BLOCK_SIZE].long() * BLOCK_SIZE + pos % BLOCK_SIZE)
    qsl = torch.zeros(len(seq_lens) + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(torch.tensor(query_lens), 0)
    return AttentionMetadata(
        positions=torch.cat(positions).to(device),
        slot_mapping=torch.cat(slots).to(device),
        query_start_loc=qsl.to(device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        context_lens=torch.tensor(ctx, dtype=torch.int32, device=device),
        block_tables=bt.to(device),
        query_lens_cpu=tuple(query_lens),
        seq_lens_cpu=tuple(seq_lens),
        context_lens_cpu=tuple(ctx),
        num_decodes=num_decodes,
        decode_query_len=decode_query_len,
    )


def make_batch(
    seq_lens: list[int],
    query_lens: list[int],
    hkv: int = 4,
    head_dim: int = 128,
    index_dim: int = 128,
    kv_dtype: torch.dtype = torch.bfloat16,
    index_dtype: torch.dtype = torch.bfloat16,
    device: torch.device | str = "cpu",
    seed: int = 0,
    num_decodes: int = 0,
    decode_query_len: int = 1,
) -> PagedBatch:
    gen = torch.Generator().manual_seed(seed)
    md = make_metadata(
        seq_lens,
        query_lens,
        device,
        gen,
        num_decodes=num_decodes,
        decode_query_len=decode_query_len,
    )
    pages = int(md.block_tables.max()) + 4
    kv = torch.randn((pages, hkv, BLOCK_SIZE, 2 * head_dim), generator=gen)
    idx = torch.randn((pages, BLOCK_SIZE, index_dim), generator=gen)
    return PagedBatch(
        md, kv.to(device=device, dtype=kv_dtype), idx.to(device=device, dtype=index_dtype)
    )
