"""Kernel-vs-reference cases, shared by the CPU interpreter test (run as a script in a
subprocess with TRITON_INTERPRET=1, tiny shapes) and the GPU tests (imported, real shapes).

Each case builds fresh random data, runs the Triton path and the plain-torch reference, and
raises AssertionError with the measured figures when the PROTOCOL's gate fails.
"""

from __future__ import annotations

import sys

import torch
from m3agent.engine.native.kernels import (
    dense_attention,
    fused_qknorm_rope,
    index_select,
    insert,
    sparse_attention,
)
from m3agent.engine.native.kernels.checks import check_selection, rel_error
from m3agent.engine.native.kernels.testing import make_batch
from m3agent.engine.native.layers.msa import index_selection_keys

# Triton 3.9's CPU interpreter computes bf16 tl.dot wrongly (errors ~1e10 on a 16x16 product,
# fp16 and fp32 exact), so the interpreter cases run in fp16 and the GPU cases in bf16.
ACT = {"cpu": torch.float16, "cuda": torch.bfloat16}


def _act(device) -> torch.dtype:
    """The activation dtype the cases use on `device` (ACT, by device type)."""
    return ACT[str(device).split(":")[0]]


def _randn(device, *shape) -> torch.Tensor:
    """Standard-normal data in the activation dtype (drawn in float32, then cast)."""
    return torch.randn(*shape, device=device).to(_act(device))


def _batch(seq_lens, query_lens, *, hkv, d, device, seed, **kw):
    """make_batch with index keys as wide as the heads (d), as every attention case has it; a
    cache dtype given as None is the activation dtype (the cases' default)."""
    for key in ("kv_dtype", "index_dtype"):
        if key in kw and kw[key] is None:
            kw[key] = _act(device)
    return make_batch(
        list(seq_lens),
        list(query_lens),
        hkv=hkv,
        head_dim=d,
        index_dim=d,
        device=device,
        seed=seed,
        **kw,
    )


def _gate(out, ref, rel_max=5e-3, cos_min=0.9999, what=""):
    rel, cos = rel_error(out, ref)
    assert rel <= rel_max and cos >= cos_min, f"{what}: rel {rel:.2e} cos {cos:.6f}"
    return rel, cos


def _caches_batch(seq_lens, query_lens, kv_dtype, *, hkv, d, device, seed):
    """A batch whose KV and index caches are both kv_dtype (None: the activation dtype)."""
    return _batch(
        seq_lens,
        query_lens,
        hkv=hkv,
        d=d,
        device=device,
        seed=seed,
        kv_dtype=kv_dtype,
        index_dtype=kv_dtype,
    )


def case_insert(device="cpu", kv_dtype=None, t=37, hkv=2, d=64):
    b = _caches_batch([300, 90], [200, 90], kv_dtype, hkv=hkv, d=d, device=device, seed=1)
    t = b.md.num_tokens
    k = _randn(device, t, hkv, d)
    v = _randn(device, t, hkv, d)
    ik = _randn(device, t, d)
    slots = b.md.slot_mapping.clone()
    slots[3] = -1  # padding row: must be skipped
    kv_ref, idx_ref = b.kv_cache.clone(), b.index_cache.clone()
    insert.insert_kv(k, v, b.kv_cache, slots)
    insert.insert_index(ik, b.index_cache, slots)
    insert.reference_insert_kv(k, v, kv_ref, slots)
    insert.reference_insert_index(ik, idx_ref, slots)
    assert torch.equal(b.kv_cache.view(torch.uint8), kv_ref.view(torch.uint8)), "kv insert differs"
    assert torch.equal(b.index_cache.view(torch.uint8), idx_ref.view(torch.uint8)), (
        "index insert differs"
    )


def case_fused(device="cpu", kv_dtype=None, hq=4, hkv=2, hi=2, d=64, rot=32):
    b = _caches_batch([260, 40], [130, 40], kv_dtype, hkv=hkv, d=d, device=device, seed=2)
    t = b.md.num_tokens
    r = lambda *s: _randn(device, *s)  # noqa: E731
    q, k, v, iq, ik = r(t, hq, d), r(t, hkv, d), r(t, hkv, d), r(t, hi, d), r(t, d)
    ws = [r(d) * 0.1 for _ in range(4)]
    pos = torch.arange(1024, dtype=torch.float32, device=device)
    inv = 10000.0 ** (-torch.arange(0, rot, 2, device=device).float() / rot)
    ang = pos[:, None] * inv[None]
    cs = torch.cat([ang.cos(), ang.sin()], -1).to(_act(device))
    args = dict(
        cos_sin_cache=cs, positions=b.md.positions, eps=1e-6, slot_mapping=b.md.slot_mapping
    )
    q2, iq2, kv2, idx2 = q.clone(), iq.clone(), b.kv_cache.clone(), b.index_cache.clone()
    fused_qknorm_rope.fused_qknorm_rope_insert(
        q, k, v, iq, ik, *ws, kv_cache=b.kv_cache, index_cache=b.index_cache, **args
    )
    fused_qknorm_rope.reference(q2, k, v, iq2, ik, *ws, kv_cache=kv2, index_cache=idx2, **args)
    tol = 0.07 if kv_dtype == torch.float8_e4m3fn else 0.02
    _gate(q.float(), q2.float(), 0.01, 0.9999, "q")
    _gate(iq.float(), iq2.float(), 0.01, 0.9999, "iq")
    _gate(b.kv_cache.float(), kv2.float(), tol, 0.999, "kv cache")
    _gate(b.index_cache.float(), idx2.float(), tol, 0.999, "index cache")
    if kv_dtype == torch.float8_e4m3fn:  # e4m3 index queries written beside (iq_out)
        iq3 = r(t, hi, d)
        iq4 = iq3.clone()
        out = torch.empty(iq3.shape, dtype=kv_dtype, device=device)
        ref = torch.empty(iq3.shape, dtype=kv_dtype, device=device)
        kv3, idx3 = b.kv_cache.clone(), b.index_cache.clone()
        fused_qknorm_rope.fused_qknorm_rope_insert(
            q.clone(), k, v, iq3, ik, *ws, kv_cache=kv3, index_cache=idx3, iq_out=out, **args
        )
        fused_qknorm_rope.reference(
            q.clone(),
            k,
            v,
            iq4,
            ik,
            *ws,
            kv_cache=kv3.clone(),
            index_cache=idx3.clone(),
            iq_out=ref,
            **args,
        )
        _gate(out.float(), ref.float(), tol, 0.999, "iq_out e4m3")
        assert torch.equal(iq3, iq4), "iq must stay untouched when iq_out is given"


def case_select(
    device="cpu",
    index_dtype=None,
    seq_lens=(1500, 700, 300),
    query_lens=(200, 1, 300),
    h=2,
    di=64,
    topk=4,
    init=0,
    local=1,
    num_decodes=0,
):
    b = _batch(
        seq_lens,
        query_lens,
        hkv=h,
        d=di,
        device=device,
        seed=3,
        index_dtype=index_dtype,
        num_decodes=num_decodes,
        decode_query_len=query_lens[0],
    )
    t = b.md.num_tokens
    iq = _randn(device, t, h, di)
    sel = index_select.index_select_blocks(iq, b.index_cache, b.md, topk, init, local)
    ref_keys = index_selection_keys(iq, b.index_cache, b.md, init, local)
    ref_sel = index_select.reference(iq, b.index_cache, b.md, topk, init, local)
    chk = check_selection(sel, ref_sel, ref_keys, b.md.positions)
    assert chk.ok, f"selection: {chk}"
    return chk


def case_topk(device="cpu", rows=37, nb=300, topk=16):
    from m3agent.engine.native.kernels.topk import reference, topk_blocks

    s = torch.randn(rows, nb, device=device)
    s[:2, 10:] = float("-inf")  # rows with fewer than topk finite scores
    s[2, :] = float("-inf")
    s[rows - 1, 3] = 1e29
    got = topk_blocks(s, topk)
    want = reference(s, topk)
    for r in range(rows):
        g, w = got[r].tolist(), want[r].tolist()
        assert sorted(g) == sorted(w), f"row {r}: {g} vs {w}"


def case_sparse(
    device="cpu",
    kv_dtype=None,
    seq_lens=(1500, 700, 300),
    query_lens=(200, 5, 300),
    hq=8,
    hkv=2,
    d=64,
    topk=4,
    num_decodes=0,
    decode_query_len=1,
    rel_max=5e-3,
):
    b = _batch(
        seq_lens,
        query_lens,
        hkv=hkv,
        d=d,
        device=device,
        seed=4,
        kv_dtype=kv_dtype,
        num_decodes=num_decodes,
        decode_query_len=decode_query_len,
    )
    t = b.md.num_tokens
    q = _randn(device, t, hq, d)
    iq = _randn(device, t, hkv, d)
    sel = index_select.reference(iq, b.index_cache, b.md, topk)
    scale = d**-0.5
    out = sparse_attention.sparse_attention(q, b.kv_cache, sel, b.md, scale)
    ref = sparse_attention.reference(q.float(), b.kv_cache, sel, b.md, scale)
    return _gate(out.float(), ref, rel_max, 0.9999, "sparse attention")


def case_decode_chunks(device="cpu", kv_dtype=None, chunks=2, fused_merge=False):
    """Several selected blocks per split-K chunk (the unrolled in-program loop)."""
    b = _batch(
        [900, 1500, 3000],
        [2, 2, 2],
        hkv=2,
        d=64,
        device=device,
        seed=6,
        kv_dtype=kv_dtype,
        num_decodes=3,
        decode_query_len=2,
    )
    t = b.md.num_tokens
    q = _randn(device, t, 8, 64)
    sel = index_select.reference(_randn(device, t, 2, 64), b.index_cache, b.md, 8)
    out = sparse_attention.sparse_attention_decode(
        q, b.kv_cache, sel, b.md, 0.125, chunks=chunks, fused_merge=fused_merge
    )
    if fused_merge:  # twice: the last arrival must have left every counter at zero
        out = sparse_attention.sparse_attention_decode(
            q, b.kv_cache, sel, b.md, 0.125, chunks=chunks, fused_merge=True
        )
    return _gate(
        out.float(),
        sparse_attention.reference(q.float(), b.kv_cache, sel, b.md, 0.125),
        5e-3,
        0.9999,
        f"decode chunks={chunks}",
    )


def case_dense(device="cpu", seq_lens=(300, 129), query_lens=(100, 1), hq=8, hkv=2, d=64):
    act = _act(device)
    b = make_batch(
        list(seq_lens), list(query_lens), hkv=hkv, head_dim=d, device=device, seed=5, kv_dtype=act
    )
    q = _randn(device, b.md.num_tokens, hq, d)
    out = dense_attention.dense_attention(q, b.kv_cache, b.md, d**-0.5)
    ref = dense_attention.reference(q.float(), b.kv_cache, b.md, d**-0.5)
    return _gate(out.float(), ref, 1e-2, 0.9999, "dense attention")


def case_add_rmsnorm(device="cpu", t=7, n=300, residual=True):
    from m3agent.engine.native.kernels import add_rmsnorm

    act = _act(device)
    x = torch.randn(t, n, device=device).to(act)
    r = torch.randn(t, n, device=device).to(act) if residual else None
    w = (0.1 * torch.randn(n, device=device)).to(act)
    y, ro = add_rmsnorm.add_rmsnorm(x, r, w, 1e-6)
    ry, rro = add_rmsnorm.reference(x, r, w, 1e-6)
    assert torch.equal(ro, rro), "residual sum differs"
    return _gate(y.float(), ry.float(), 1e-2, 0.9999, "add_rmsnorm")


def case_swiglu(device="cpu", t=5, inter=1500):
    from m3agent.engine.native.kernels import swiglu

    act = _act(device)
    gu = (4 * torch.randn(t, 2 * inter, device=device)).to(act)  # past the +-7 clamp too
    out = swiglu.swiglu_oai_merged(gu, 1.702, 7.0, 1.0)
    ref = swiglu.reference(gu, 1.702, 7.0, 1.0)
    return _gate(out.float(), ref.float(), 1e-2, 0.9999, "swiglu_oai")


def _moe_weights(e, n, k, fmt, device, act):
    from m3agent.engine.native.loaders.fp8 import quantize_fp8

    w = torch.randn(e, n, k, device=device) * k**-0.5
    if fmt == "bf16":
        return w.to(act), None
    if fmt == "fp8":
        qs = [quantize_fp8(w[i].cpu()) for i in range(e)]
        return (
            torch.stack([q for q, _ in qs]).to(device),
            torch.stack([s for _, s in qs]).float().to(device),
        )
    # mxfp8: a power-of-two scale per 32 k-values, e4m3 mantissas
    g = w.view(e, n, k // 32, 32)
    ex = torch.ceil(torch.log2(g.abs().amax(-1).clamp(min=1e-30) / 448.0)).clamp(-127, 127)
    q = (g / torch.exp2(ex)[..., None]).clamp(-448, 448).view(e, n, k)
    return q.to(torch.float8_e4m3fn), (ex + 127).to(torch.uint8)


def case_moe(device="cpu", fmt="bf16", t=5, e=8, hidden=256, inter=128, k=2):
    from m3agent.engine.native.kernels import moe_grouped, moe_router

    act = _act(device)
    x = torch.randn(t, hidden, device=device).to(act)
    logits = torch.randn(t, e, device=device)
    bias = 0.01 * torch.randn(e, device=device)
    w, ids = moe_router.route(logits, bias, k, 2.0)
    rw, rids = moe_router.reference(logits, bias, k, 2.0)
    assert torch.equal(ids.sort(-1).values, rids.sort(-1).values), "router picks differ"
    assert torch.allclose(w.sort(-1).values, rw.sort(-1).values, atol=1e-5), "router weights"
    w13, s13 = _moe_weights(e, 2 * inter, hidden, fmt, device, act)
    w2, s2 = _moe_weights(e, hidden, inter, fmt, device, act)
    out = moe_grouped.grouped_moe(x, w13, w2, w, ids, fmt=fmt, w13_scale=s13, w2_scale=s2)
    ref = moe_grouped.reference(x, w13, w2, w, ids, fmt=fmt, w13_scale=s13, w2_scale=s2)
    return _gate(out, ref, 1e-2, 0.9999, f"moe {fmt}")


CPU_CASES = {
    "moe_bf16": lambda: case_moe(),
    "moe_fp8": lambda: case_moe(fmt="fp8"),
    "moe_mxfp8": lambda: case_moe(fmt="mxfp8"),
    "moe_prefill": lambda: case_moe(t=150, e=4, hidden=128, inter=64),
    "moe_decode_t1": lambda: case_moe(t=1, k=4, fmt="fp8"),
    "add_rmsnorm": lambda: (case_add_rmsnorm(), case_add_rmsnorm(residual=False)),
    "swiglu": lambda: case_swiglu(),
    "insert": lambda: case_insert(),
    "fused": lambda: case_fused(),
    "select_prefill": lambda: case_select(),
    "select_decode_q1": lambda: case_select(
        seq_lens=(900, 129, 1500, 40), query_lens=(1, 1, 1, 1), num_decodes=4
    ),
    "select_decode_q3_init": lambda: case_select(
        seq_lens=(900, 1500), query_lens=(3, 3), init=1, local=2, num_decodes=2
    ),
    "sparse_prefill": lambda: case_sparse(seq_lens=(700, 300), query_lens=(150, 300)),
    "sparse_decode_q1": lambda: case_sparse(
        seq_lens=(900, 129, 1500, 40), query_lens=(1, 1, 1, 1), num_decodes=4
    ),
    "sparse_mixed": lambda: case_sparse(
        seq_lens=(900, 1500, 600), query_lens=(2, 2, 70), num_decodes=2, decode_query_len=2
    ),
    "dense": lambda: case_dense(),
    "dense_split": lambda: case_dense(seq_lens=(3000, 2100), query_lens=(1, 1)),
    "topk": lambda: case_topk(),
    "decode_chunks": lambda: (
        case_decode_chunks(chunks=2),
        case_decode_chunks(chunks=1),
        case_decode_chunks(kv_dtype=torch.float8_e4m3fn, chunks=2),
    ),
    "decode_fused_merge": lambda: (
        case_decode_chunks(chunks=2, fused_merge=True),
        case_decode_chunks(chunks=8, fused_merge=True),
        case_decode_chunks(kv_dtype=torch.float8_e4m3fn, chunks=4, fused_merge=True),
    ),
    "topk_two_stage": lambda: case_topk(rows=5, nb=3000),
    # fp8 e4m3 caches: loads and products only (the interpreter's fp32->fp8 rounding is wrong,
    # so fp8 *inserts* are checked on the GPU).
    "select_fp8": lambda: case_select(
        index_dtype=torch.float8_e4m3fn, seq_lens=(900, 129), query_lens=(2, 2), num_decodes=2
    ),
    "sparse_fp8": lambda: case_sparse(
        kv_dtype=torch.float8_e4m3fn, seq_lens=(900, 129), query_lens=(1, 1), num_decodes=2
    ),
}

if __name__ == "__main__":
    failed = 0
    for name in sys.argv[1:]:
        try:
            res = CPU_CASES[name]()
        except Exception as exc:  # report every case, then fail
            failed += 1
            print(name, "FAIL", f"{type(exc).__name__}: {exc}", flush=True)
        else:
            print(name, "ok", res if res is not None else "", flush=True)
    sys.exit(1 if failed else 0)
