"""The CPU path of the attention ops (layers/cpu_attention.py) against the torch references
(which test_msa.py holds to SPEC §2.8 brute force): the same outputs to float32 rounding and
the same block selections, over batches with cached prefixes, decode rows, partial pages and
shuffled physical pages, row tiles small enough that a request spans several, and both sparse
paths (the union of a tile's blocks at top-16 over these short contexts, block by block at
top-4)."""

from __future__ import annotations

import pytest
import torch
from m3agent.engine.native.kernels.testing import make_batch
from m3agent.engine.native.layers import attention, cpu_attention, msa
from m3agent.engine.native.layers.op_table import CPU_OPS, TORCH_REFERENCE, resolve_ops

# (seq lens, query lens): prefill chunks behind cached prefixes, a decode row, a fresh prompt,
# a prompt ending one token into a page
# and decode rows over longer prefixes, whose few selected blocks alone are gathered
BATCHES = [
    ([700, 300, 1100], [150, 1, 3]),
    ([1500], [300]),
    ([129, 1, 257], [129, 1, 2]),
    ([5000, 4100], [1, 2]),
]


def _batch(seqs, qls, seed, dtype=torch.float32):
    b = make_batch(
        seqs, qls, hkv=2, head_dim=32, index_dim=16, kv_dtype=dtype, index_dtype=dtype, seed=seed
    )
    gen = torch.Generator().manual_seed(seed + 1)
    q = torch.randn(b.md.num_tokens, 4, 32, generator=gen).to(dtype)
    iq = torch.randn(b.md.num_tokens, 2, 16, generator=gen).to(dtype)
    return b, q, iq


@pytest.fixture(params=[None, 16], ids=["one-tile", "16-row-tiles"])
def tiles(request, monkeypatch):
    """The default row tile, or tiles of 16 rows (a request's rows over many tiles, each
    with its own union of blocks: contiguous or not)."""
    if request.param:
        monkeypatch.setattr(cpu_attention, "_MASK_ELEMS", 1)  # the tiles' floor: 16 rows
        monkeypatch.setattr(cpu_attention, "_PAIR_ELEMS", 1)
    return request.param


@pytest.mark.parametrize("seqs,qls", BATCHES)
def test_dense_equals_reference(seqs, qls):
    b, q, _ = _batch(seqs, qls, seed=len(seqs))
    want = attention.dense_attention(q, b.kv_cache, b.md, 0.17)
    got = cpu_attention.dense_attention(q, b.kv_cache, b.md, 0.17)
    assert (got - want).abs().max().item() < 2e-6


@pytest.mark.parametrize("seqs,qls", BATCHES)
@pytest.mark.parametrize("init,local,k", [(0, 1, 4), (1, 2, 16)])
def test_selection_and_sparse_equal_reference(seqs, qls, init, local, k, tiles):
    b, q, iq = _batch(seqs, qls, seed=k + init)
    want = msa.index_select_blocks(iq, b.index_cache, b.md, k, init, local)
    got = cpu_attention.index_select_blocks(iq, b.index_cache, b.md, k, init, local)
    assert torch.equal(want.sort(-1).values, got.sort(-1).values)
    noisy = want.clone()
    noisy[::3, 0, -1] = 10_000  # an id past every request's blocks: skipped by both
    noisy[1::3, 1, -1] = noisy[1::3, 1, 0]  # a block listed twice counts once
    ref = msa.sparse_attention(q, b.kv_cache, noisy, b.md, 0.2)
    out = cpu_attention.sparse_attention(q, b.kv_cache, noisy, b.md, 0.2)
    assert (out - ref).abs().max().item() < 2e-6


def test_a_decode_row_reads_only_the_blocks_it_selected(monkeypatch):
    """Over a long prefix only the selected pages are gathered; the rest of the buffer is
    never read (filled with NaN here, the output still equals the reference's)."""
    partial = []

    def nan_buffer(shape, dtype, device):
        partial.append(shape)
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(cpu_attention, "_unwritten", nan_buffer)
    b, q, iq = _batch([5000, 4100], [1, 2], seed=3)
    sel = msa.index_select_blocks(iq, b.index_cache, b.md, 4, 1, 1)
    ref = msa.sparse_attention(q, b.kv_cache, sel, b.md, 0.2)
    out = cpu_attention.sparse_attention(q, b.kv_cache, sel, b.md, 0.2)
    assert len(partial) == 2 and (out - ref).abs().max().item() < 2e-6


def test_half_precision_is_computed_in_float32():
    """A bf16 model's attention: fp32 maths as in the references, bf16 out."""
    b, q, iq = _batch([600, 300], [200, 1], seed=3, dtype=torch.bfloat16)
    sel = msa.index_select_blocks(iq, b.index_cache, b.md, 3, 0, 1)
    for ref, fast, args in (
        (attention.dense_attention, cpu_attention.dense_attention, ()),
        (msa.sparse_attention, cpu_attention.sparse_attention, (sel,)),
    ):
        want = ref(q, b.kv_cache, *args, b.md, 0.2)
        got = fast(q, b.kv_cache, *args, b.md, 0.2)
        assert got.dtype == torch.bfloat16
        assert (got.float() - want.float()).abs().max().item() <= 0.02


def test_the_cpu_table_and_its_switch(monkeypatch):
    assert resolve_ops("cpu", torch.float32, torch_ops="") is CPU_OPS
    assert resolve_ops("cpu", torch.bfloat16, torch_ops="") is CPU_OPS
    assert CPU_OPS.sparse_attention is cpu_attention.sparse_attention
    assert CPU_OPS.insert_kv is TORCH_REFERENCE.insert_kv
    kept = resolve_ops("cpu", torch.float32, torch_ops="sparse_attention")
    assert kept.sparse_attention is msa.sparse_attention
    assert kept.dense_attention is cpu_attention.dense_attention
    monkeypatch.setenv("M3AGENT_TORCH_OPS", "all")
    assert resolve_ops("cpu", torch.float32) == TORCH_REFERENCE
