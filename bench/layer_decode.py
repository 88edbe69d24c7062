"""PROTOCOL row layer_decode: one MSA layer's decode attention (index scoring + top-k +
sparse attention) against dense SDPA decode over the whole context (cuDNN and
FlashAttention-2 backends), ctx 1M (and 128K), batch 1 and 8, query length 1."""
# ruff: noqa: B023  (closures are called at once, inside the loop that binds them)

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from common import emit, main_guard, paged_md, rand_cache, sdpa_backends, time_graph, vs_dense  # noqa: E402
from m3agent.engine.native.kernels import index_select  # noqa: E402
from m3agent.engine.native.kernels import sparse_attention as sa  # noqa: E402
from torch.nn.attention import sdpa_kernel  # noqa: E402

HQ, HKV, D, H, DI, TOPK = 64, 4, 128, 4, 128, 16


def dense_decode(ctx: int, b: int) -> dict:
    """SDPA decode: the 16 query heads of a KV group ride as 16 query rows of one head (no
    mask needed at decode), so every backend sees plain MHA over [b, 4, ctx, 128]."""
    nl = 2
    ks = [torch.randn(b, HKV, ctx, D, device="cuda", dtype=torch.bfloat16) for _ in range(nl)]
    vs = [torch.randn(b, HKV, ctx, D, device="cuda", dtype=torch.bfloat16) for _ in range(nl)]
    q = torch.randn(b, HKV, HQ // HKV, D, device="cuda", dtype=torch.bfloat16)
    out = {}
    for name, be in sdpa_backends().items():
        try:
            with sdpa_kernel([be]):
                r = time_graph(lambda i: F.scaled_dot_product_attention(q, ks[i], vs[i]), nl)
            out[name] = r["median_us"]
        except Exception as exc:  # a backend that refuses the shape is reported, not fatal
            out[name] = None
            out[name + "_error"] = str(exc).splitlines()[0][:200]
    ks.clear()
    vs.clear()
    return out


def run(rows: list, ceil: dict, cases=((1_048_576, 1), (1_048_576, 8), (131_072, 1))) -> None:
    for ctx, b in cases:
        dense = dense_decode(ctx, b)
        best = min(v for k, v in dense.items() if not k.endswith("_error") and v)
        for kv_dtype, idx_dtype in (
            (torch.bfloat16, torch.bfloat16),
            (torch.float8_e4m3fn, torch.float8_e4m3fn),
        ):
            nl = 2
            md = paged_md([ctx] * b, [1] * b, num_decodes=b, decode_query_len=1)
            pages = int(md.block_tables.max()) + 1
            kvs = [rand_cache((pages, HKV, 128, 2 * D), kv_dtype) for _ in range(nl)]
            idxs = [rand_cache((pages, 128, DI), idx_dtype) for _ in range(nl)]
            q = torch.randn(b, HQ, D, device="cuda", dtype=torch.bfloat16)
            iq = torch.randn(b, H, DI, device="cuda").to(idx_dtype)

            def step(i):
                sel = index_select.index_select_blocks(iq, idxs[i], md, TOPK)
                return sa.sparse_attention(q, kvs[i], sel, md, D**-0.5)

            r = time_graph(step, nl)
            dense_bytes = 2 * b * HKV * ctx * D * 2
            msa_bytes = (
                b * ctx * DI * idx_dtype.itemsize + b * HKV * TOPK * 128 * 2 * D * kv_dtype.itemsize
            )
            emit(
                {
                    "name": "layer_decode",
                    "ctx": ctx,
                    "batch": b,
                    "kv_dtype": str(kv_dtype).split(".")[-1],
                    "index_dtype": str(idx_dtype).split(".")[-1],
                    **vs_dense(r, "dense_us", dense, best),
                    "byte_bound_speedup": dense_bytes / msa_bytes,
                    "msa_pct_read_roofline": msa_bytes
                    / (r["median_us"] * 1e-6)
                    / 1e12
                    / ceil["read_TBps"],
                },
                rows,
            )
            kvs.clear()
            idxs.clear()


if __name__ == "__main__":
    main_guard(run)
