"""PROTOCOL row layer_prefill_chunk: one MSA layer's attention for a 4K prefill chunk at 1M
context (index scoring + top-k + sparse attention) against the dense SDPA chunk (4K queries
over 1M keys, bottom-right causal, GQA 64/4) with the cuDNN and FlashAttention-2 backends."""

from __future__ import annotations

# ruff: noqa: B023  (closures are called at once, inside the loop that binds them)
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from common import emit, main_guard, paged_md, rand_cache, sdpa_backends, time_eager, vs_dense  # noqa: E402
from m3agent.engine.native.kernels import index_select  # noqa: E402
from m3agent.engine.native.kernels import sparse_attention as sa  # noqa: E402
from torch.nn.attention import sdpa_kernel  # noqa: E402
from torch.nn.attention.bias import causal_lower_right  # noqa: E402

HQ, HKV, D, DI, TOPK = 64, 4, 128, 128, 16


def dense_chunk(chunk: int, ctx: int) -> dict:
    q = torch.randn(1, HQ, chunk, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, HKV, ctx, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, HKV, ctx, D, device="cuda", dtype=torch.bfloat16)
    mask = causal_lower_right(chunk, ctx)
    out = {}
    for name, be in sdpa_backends().items():
        try:
            with sdpa_kernel([be]):
                r = time_eager(
                    lambda i: F.scaled_dot_product_attention(
                        q, k, v, attn_mask=mask, enable_gqa=True
                    ),
                    1,
                    3,
                )
            out[name] = r["median_us"]
            out[name + "_how"] = "enable_gqa"
        except Exception as exc:  # noqa: BLE001
            try:  # expand the KV heads when a backend refuses GQA or this mask with it
                ke = k.repeat_interleave(HQ // HKV, 1)
                ve = v.repeat_interleave(HQ // HKV, 1)
                with sdpa_kernel([be]):
                    r = time_eager(
                        lambda i: F.scaled_dot_product_attention(q, ke, ve, attn_mask=mask), 1, 3
                    )
                out[name] = r["median_us"]
                out[name + "_how"] = "expanded kv; gqa error: " + str(exc).splitlines()[0][:120]
                del ke, ve
            except Exception as exc2:  # noqa: BLE001
                out[name] = None
                out[name + "_error"] = str(exc2).splitlines()[0][:200]
    flops = 4.0 * HQ * D * chunk * (ctx - chunk / 2)
    for name in sdpa_backends():
        if out.get(name):
            out[name + "_TFLOPs"] = flops / (out[name] * 1e-6) / 1e12
    return out


def run(rows: list, ceil: dict, chunk: int = 4096, ctx: int = 1_048_576) -> None:
    dense = dense_chunk(chunk, ctx)
    best = min(v for k, v in dense.items() if k in sdpa_backends() and v)
    md = paged_md([ctx], [chunk])
    pages = int(md.block_tables.max()) + 1
    for idx_dtype in (torch.bfloat16, torch.float8_e4m3fn):
        kv = rand_cache((pages, HKV, 128, 2 * D), torch.bfloat16)
        idx = rand_cache((pages, 128, DI), idx_dtype)
        q = torch.randn(chunk, HQ, D, device="cuda", dtype=torch.bfloat16)
        iq = torch.randn(chunk, HKV, DI, device="cuda").to(idx_dtype)

        def step(i):
            sel = index_select.index_select_blocks(iq, idx, md, TOPK)
            return sa.sparse_attention(q, kv, sel, md, D**-0.5)

        r = time_eager(step, 1, 5)
        emit(
            {
                "name": "layer_prefill_chunk",
                "chunk": chunk,
                "ctx": ctx,
                "index_dtype": str(idx_dtype).split(".")[-1],
                **vs_dense(r, "dense", dense, best),
            },
            rows,
        )


if __name__ == "__main__":
    main_guard(run)
