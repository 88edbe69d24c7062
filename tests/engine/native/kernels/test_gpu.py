"""The kernels against their references on a CUDA GPU at M3's shapes (64 q heads, 4 KV heads,
head_dim 128, 4 index heads, top-k 16), bf16 and fp8 e4m3 caches, decode (query length 1
and 8) and chunked prefill with cached context and shuffled pages."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

F8 = torch.float8_e4m3fn
M3 = dict(hq=64, hkv=4, d=128, topk=16)


@pytest.fixture(scope="module")
def kc():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pytest.importorskip("triton")
    spec = importlib.util.spec_from_file_location(
        "kernel_cases", Path(__file__).with_name("kernel_cases.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("kv_dtype", [None, F8])
def test_insert(kc, kv_dtype):
    kc.case_insert(device="cuda", kv_dtype=kv_dtype, hkv=4, d=128)


@pytest.mark.parametrize("kv_dtype", [None, F8])
def test_fused_qknorm_rope_insert(kc, kv_dtype):
    kc.case_fused(device="cuda", kv_dtype=kv_dtype, hq=64, hkv=4, hi=4, d=128, rot=64)


SELECT = {
    "decode_q1": dict(seq_lens=(70_000, 3000, 129, 40_000), query_lens=(1, 1, 1, 1), num_decodes=4),
    "decode_q8": dict(seq_lens=(70_000, 3000, 40_000), query_lens=(8, 8, 8), num_decodes=3),
    "prefill": dict(seq_lens=(20_000, 1500), query_lens=(1024, 700)),
}


@pytest.mark.parametrize("index_dtype", [None, F8])
@pytest.mark.parametrize("shape", list(SELECT))
def test_index_select(kc, shape, index_dtype):
    kc.case_select(device="cuda", index_dtype=index_dtype, h=4, di=128, topk=16, **SELECT[shape])


SPARSE = {
    "decode_q1": dict(seq_lens=(70_000, 3000, 129, 40_000), query_lens=(1, 1, 1, 1), num_decodes=4),
    "decode_q8": dict(
        seq_lens=(70_000, 3000, 40_000), query_lens=(8, 8, 8), num_decodes=3, decode_query_len=8
    ),
    "prefill": dict(seq_lens=(20_000, 1500), query_lens=(1024, 700)),
    "mixed": dict(seq_lens=(9000, 5000, 6000), query_lens=(1, 1, 500), num_decodes=2),
}


@pytest.mark.parametrize("kv_dtype", [None, F8])
@pytest.mark.parametrize("shape", list(SPARSE))
def test_sparse_attention(kc, shape, kv_dtype):
    kc.case_sparse(device="cuda", kv_dtype=kv_dtype, **M3, **SPARSE[shape])


def test_dense_attention(kc):
    kc.case_dense(device="cuda", seq_lens=(5000, 300), query_lens=(700, 1), hq=64, hkv=4, d=128)


@pytest.mark.parametrize("rows", [4, 64, 1000])
@pytest.mark.parametrize("nb", [300, 8192, 8209])
def test_topk_rows(kc, nb, rows):
    kc.case_topk(device="cuda", rows=rows, nb=nb)


def test_dense_attention_split_decode(kc):
    kc.case_dense(device="cuda", seq_lens=(200_000, 3000), query_lens=(1, 1), hq=64, hkv=4, d=128)


@pytest.mark.parametrize("persistent", [0, 2])
def test_sparse_prefill_variants(kc, persistent):
    import torch as t
    from m3agent.engine.native.kernels import index_select
    from m3agent.engine.native.kernels import sparse_attention as sa
    from m3agent.engine.native.kernels.testing import make_batch

    b = make_batch([20_000, 1500], [1024, 700], device="cuda", seed=21)
    q = t.randn(b.md.num_tokens, 64, 128, device="cuda", dtype=t.bfloat16)
    iq = t.randn(b.md.num_tokens, 4, 128, device="cuda", dtype=t.bfloat16)
    sel = index_select.index_select_blocks(iq, b.index_cache, b.md, 16)
    ref = sa.reference(q.float(), b.kv_cache, sel, b.md, 128**-0.5)
    for tt in (4, 8):
        plan = sa.prefill_plan(sel, b.md, 16, tt)
        out = sa.sparse_attention_prefill_planned(
            q,
            b.kv_cache,
            sel,
            b.md,
            128**-0.5,
            plan,
            persistent=persistent,
            num_stages=3 if tt == 4 else 2,
        )
        kc._gate(out.float(), ref, 5e-3, 0.9999, f"tt={tt} persistent={persistent}")


@pytest.mark.parametrize("kv_dtype", [None, F8])
def test_decode_several_blocks_per_chunk(kc, kv_dtype):
    for chunks in (1, 2, 4):
        kc.case_decode_chunks(device="cuda", kv_dtype=kv_dtype, chunks=chunks)


@pytest.mark.parametrize("residual", [True, False])
def test_add_rmsnorm(kc, residual):
    kc.case_add_rmsnorm("cuda", t=33, n=6144, residual=residual)


def test_swiglu(kc):
    kc.case_swiglu("cuda", t=33, inter=12288)


@pytest.mark.parametrize("fmt", ["bf16", "fp8", "mxfp8"])
@pytest.mark.parametrize("t", [1, 8, 300])
def test_grouped_moe(kc, fmt, t):
    kc.case_moe("cuda", fmt=fmt, t=t, e=32, hidden=1024, inter=512, k=4)


@pytest.mark.parametrize("kv_dtype", [None, F8])
def test_decode_fused_merge_matches_two_kernel_merge(kc, kv_dtype):
    """The last-arrival merge against the separate merge kernel, then the same call 200 times
    (an ordering bug between the partial stores and the arrival counter would show as a call
    that differs from the first)."""
    for chunks in (2, 4, 8):  # the case selects 8 blocks
        kc.case_decode_chunks(device="cuda", kv_dtype=kv_dtype, chunks=chunks, fused_merge=True)
    from m3agent.engine.native.kernels import sparse_decode as sd

    torch.manual_seed(0)
    t, hq, hkv, d = 64, 64, 4, 128
    b = kc.make_batch(
        [128 * 60] * t,
        [1] * t,
        hkv=hkv,
        head_dim=d,
        index_dim=d,
        kv_dtype=kv_dtype or torch.bfloat16,
        device="cuda",
        seed=1,
        num_decodes=t,
        decode_query_len=1,
    )
    q = torch.randn(t, hq, d, device="cuda", dtype=torch.bfloat16)
    sel = torch.stack([torch.randperm(60, device="cuda")[:16] for _ in range(t * hkv)])
    sel = sel.view(t, hkv, 16).to(torch.int32)
    kw = dict(chunks=16)
    want = sd.sparse_attention_decode(q, b.kv_cache, sel, b.md, d**-0.5, fused_merge=False, **kw)
    first = sd.sparse_attention_decode(q, b.kv_cache, sel, b.md, d**-0.5, fused_merge=True, **kw)
    kc._gate(first.float(), want.float(), 1e-3, 0.99999, "fused vs two-kernel merge")
    for _ in range(200):  # a race would make some call differ from the first
        got = sd.sparse_attention_decode(q, b.kv_cache, sel, b.md, d**-0.5, fused_merge=True, **kw)
        assert torch.equal(got, first)
