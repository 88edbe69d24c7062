"""The correctness gates the kernel benchmarks pass before they time anything: the Triton op
against its torch reference on a small paged batch; a miss exits with the figures."""

from __future__ import annotations

import torch
from common import rand_cache, random_selection
from m3agent.engine.native.kernels import index_select
from m3agent.engine.native.kernels import sparse_attention as sa
from m3agent.engine.native.kernels.checks import check_selection, rel_error
from m3agent.engine.native.layers.msa import index_selection_keys


def selection_gate(label: str, md, cache: torch.Tensor, iq: torch.Tensor, topk: int) -> dict:
    """index_select_blocks against the reference's selection and the keys it ranks."""
    sel = index_select.index_select_blocks(iq, cache, md, topk)
    keys = index_selection_keys(iq, cache, md)
    chk = check_selection(sel, index_select.reference(iq, cache, md, topk), keys, md.positions)
    if not chk.ok:
        raise SystemExit(f"{label} correctness gate failed: {chk}")
    return {"gate_rows": chk.rows, "gate_ok": True}


def sparse_attention_gate(
    label: str, md, dtype: torch.dtype, hq: int, hkv: int, d: int, topk: int
) -> dict:
    """sparse_attention over a random selection against the reference (bf16 queries, a
    `dtype` KV cache)."""
    kv = rand_cache((int(md.block_tables.max()) + 2, hkv, 128, 2 * d), dtype)
    q = torch.randn(md.num_tokens, hq, d, device="cuda", dtype=torch.bfloat16)
    sel = random_selection(md, hkv, topk)
    out = sa.sparse_attention(q, kv, sel, md, d**-0.5)
    rel, cos = rel_error(out.float(), sa.reference(q.float(), kv, sel, md, d**-0.5))
    if rel > 5e-3 or cos < 0.9999:
        raise SystemExit(f"{label} gate failed: rel {rel} cos {cos}")
    return {"gate_rel": rel, "gate_cos": cos}
