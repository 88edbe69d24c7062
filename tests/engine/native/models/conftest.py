"""Shared helpers: paged-cache metadata for hand-built batches (what a runner would build)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from m3agent.engine.native.core.attention_metadata import BLOCK_SIZE, AttentionMetadata


def page_tables(
    seq_lens: list[int], num_blocks: int, gen: torch.Generator, shuffle: bool = True
) -> list[list[int]]:
    """Distinct physical pages for each request, shuffled across requests if asked."""
    need = [-(-s // BLOCK_SIZE) for s in seq_lens]
    if sum(need) > num_blocks:
        raise ValueError("not enough pages")
    order = (
        torch.randperm(num_blocks, generator=gen) if shuffle else torch.arange(num_blocks)
    ).tolist()
    out, i = [], 0
    for n in need:
        out.append(order[i : i + n])
        i += n
    return out


def build_md(
    steps: list[tuple[int, int]], tables: list[list[int]], device: str | torch.device = "cpu"
) -> AttentionMetadata:
    """steps[r] = (context_len, query_len) of request r in this step."""
    pos, slots, qsl = [], [], [0]
    for (cl, ql), bt in zip(steps, tables, strict=True):
        p = torch.arange(cl, cl + ql)
        pos.append(p)
        slots.append(
            torch.tensor(bt, dtype=torch.int64)[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE
        )
        qsl.append(qsl[-1] + ql)
    width = max(len(t) for t in tables)
    bt = torch.zeros(len(tables), width, dtype=torch.int32)
    for r, t in enumerate(tables):
        bt[r, : len(t)] = torch.tensor(t, dtype=torch.int32)
    return AttentionMetadata(
        positions=torch.cat(pos).to(device),
        slot_mapping=torch.cat(slots).to(device),
        query_start_loc=torch.tensor(qsl, dtype=torch.int32, device=device),
        seq_lens=torch.tensor([c + q for c, q in steps], dtype=torch.int32, device=device),
        context_lens=torch.tensor([c for c, _ in steps], dtype=torch.int32, device=device),
        block_tables=bt.to(device),
        query_lens_cpu=tuple(q for _, q in steps),
        seq_lens_cpu=tuple(c + q for c, q in steps),
        context_lens_cpu=tuple(c for c, _ in steps),
    )


def make_caches(
    model, num_blocks: int, dtype=torch.float32, device="cpu", fill: float | None = None
):
    """Per-layer caches for a NativeModel; `fill` puts garbage in every slot first."""
    from m3agent.engine.native.core.model_api import LayerCache

    caches = []
    for spec in model.cache_specs():
        kv = torch.zeros(
            num_blocks, spec.num_kv_heads, BLOCK_SIZE, 2 * spec.head_dim, dtype=dtype, device=device
        )
        idx = (
            torch.zeros(num_blocks, BLOCK_SIZE, spec.index_dim, dtype=dtype, device=device)
            if spec.index_dim
            else None
        )
        if fill is not None:
            kv.fill_(fill)
            if idx is not None:
                idx.fill_(fill)
        caches.append(LayerCache(kv=kv, index=idx))
    return caches


def run_prompt(
    model,
    ids: list[int],
    chunk: int | None = None,
    num_blocks: int | None = None,
    gen: torch.Generator | None = None,
    fill: float | None = None,
    splits: list[int] | None = None,
) -> torch.Tensor:
    """One request through the paged path -> logits [len(ids), vocab]. `chunk` cuts the prompt
    into equal steps; `splits` gives each step's length (e.g. [120, 1, 1, ...] = decode)."""
    gen = gen or torch.Generator().manual_seed(0)
    need = -(-len(ids) // BLOCK_SIZE)
    nb = num_blocks or need + 3
    tables = page_tables([len(ids)], nb, gen)
    caches = make_caches(model, nb, dtype=model.info.dtype, fill=fill)
    if splits is None:
        chunk = chunk or len(ids)
        splits = [min(chunk, len(ids) - c0) for c0 in range(0, len(ids), chunk)]
    if sum(splits) != len(ids):
        raise ValueError("splits must add up to the prompt length")
    out, c0 = [], 0
    for n in splits:
        c1, c0 = c0 + n, c0
        md = build_md([(c0, c1 - c0)], tables)
        h = model.forward(torch.tensor(ids[c0:c1]), caches, md)
        out.append(model.compute_logits(h))
        c0 = c1
    return torch.cat(out)


@pytest.fixture(scope="module")
def one_thread():
    """Small ops on a shared, loaded CI box: two OpenMP threads spin against other jobs and
    run ~10x slower than one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def paged() -> SimpleNamespace:
    return SimpleNamespace(
        page_tables=page_tables, build_md=build_md, make_caches=make_caches, run_prompt=run_prompt
    )
