"""The kernels' plain-torch references against brute force written straight from SPEC 2.8
(per token, per head loops), in float32 on the CPU."""

from __future__ import annotations

import torch
from m3agent.engine.native.kernels import dense_attention, index_select, sparse_attention
from m3agent.engine.native.kernels.testing import make_batch


def _contig(b, r):
    """Contiguous per-request K, V [L, Hkv, D] and index keys [L, Di] through the block table."""
    seq = b.md.seq_lens_cpu[r]
    j = torch.arange(seq)
    pages = b.md.block_tables[r, j // 128].long()
    kv = b.kv_cache[pages, :, j % 128].float()
    d = kv.shape[-1] // 2
    return kv[..., :d], kv[..., d:], b.index_cache[pages, j % 128].float()


def _f32_batch(seq_lens, query_lens, hkv, seed):
    """A float32 batch with 16-wide heads and index keys."""
    return make_batch(
        seq_lens,
        query_lens,
        hkv=hkv,
        head_dim=16,
        index_dim=16,
        kv_dtype=torch.float32,
        index_dtype=torch.float32,
        seed=seed,
    )


def _brute_select(iq_t, ik, pos, k, init, local):
    n = pos // 128 + 1
    scores = [
        max(float(iq_t @ ik[j]) for j in range(128 * b, min(128 * b + 128, pos + 1)))
        for b in range(n)
    ]
    forced = {b for b in range(min(init, n))} | {b for b in range(max(0, n - local), n)}
    free = sorted((b for b in range(n) if b not in forced), key=lambda b: -scores[b])
    return forced | set(free[: min(k, n) - len(forced)])


def test_selection_reference_equals_brute_force():
    b = _f32_batch([700, 300, 1100], [150, 1, 3], hkv=2, seed=11)
    iq = torch.randn(b.md.num_tokens, 2, 16)
    for init, local, k in [(0, 1, 4), (1, 1, 4), (1, 2, 3), (0, 1, 16)]:
        sel = index_select.reference(iq, b.index_cache, b.md, k, init, local)
        start = 0
        for r, qlen in enumerate(b.md.query_lens_cpu):
            ik = _contig(b, r)[2]
            for i in range(start, start + qlen, 7):
                pos = int(b.md.positions[i])
                for h in range(2):
                    want = _brute_select(iq[i, h], ik, pos, k, init, local)
                    got = sel[i, h]
                    assert set(got[got >= 0].tolist()) == want
                    assert int((got < 0).sum()) == k - min(k, pos // 128 + 1)
            start += qlen


def test_sparse_reference_equals_brute_force_and_dense_when_all_blocks_chosen():
    b = _f32_batch([520, 260], [130, 2], hkv=2, seed=12)
    t = b.md.num_tokens
    q = torch.randn(t, 4, 16)
    sel = torch.randint(0, 5, (t, 2, 3), dtype=torch.int32)
    sel[:, :, 2] = -1
    out = sparse_attention.reference(q, b.kv_cache, sel, b.md, 0.25)
    start = 0
    for r, qlen in enumerate(b.md.query_lens_cpu):
        kk, vv, _ = _contig(b, r)
        for i in range(start, start + qlen, 5):
            pos = int(b.md.positions[i])
            for qh in range(4):
                g = qh // 2
                blocks = {int(x) for x in sel[i, g] if x >= 0}
                keys = [j for j in range(b.md.seq_lens_cpu[r]) if j // 128 in blocks and j <= pos]
                if not keys:
                    continue
                w = torch.softmax(torch.stack([0.25 * q[i, qh] @ kk[j, g] for j in keys]), 0)
                want = sum(w[n] * vv[j, g] for n, j in enumerate(keys))
                torch.testing.assert_close(out[i, qh], want, rtol=1e-5, atol=1e-5)
        start += qlen
    every = torch.arange(16, dtype=torch.int32).expand(t, 2, 16).contiguous()
    dense = dense_attention.reference(q, b.kv_cache, b.md, 0.25)
    torch.testing.assert_close(
        sparse_attention.reference(q, b.kv_cache, every, b.md, 0.25), dense, rtol=1e-5, atol=1e-5
    )


def test_observed_triton_example_position_300():
    """SPEC 2.4: topk=4 at position 300 selects blocks {0, 1, 2} and one -1."""
    b = _f32_batch([301], [1], hkv=1, seed=13)
    sel = index_select.reference(torch.randn(1, 1, 16), b.index_cache, b.md, 4)
    assert sorted(sel[0, 0].tolist()) == [-1, 0, 1, 2]
