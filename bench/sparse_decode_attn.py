"""PROTOCOL row sparse_decode_attn: split-K sparse decode attention over the 16 selected
blocks, batch 1/8/64, query length 1/8, bf16 and fp8 KV; us and % of the read roofline on the
gathered bytes (K and V of every selected page, per token and KV head).

Each shape is timed with the split-K partials merged by the last-arriving program
(`fused_merge`, the default) and by the separate merge kernel (the earlier path), in the same
run; at batch 1 and 8 also with 4, 8 and 16 partials per (token, KV head)."""
# ruff: noqa: B023  (closures are called at once, inside the loop that binds them)

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from common import emit, main_guard, paged_md, rand_cache, random_selection, time_graph  # noqa: E402
from kernel_gates import sparse_attention_gate  # noqa: E402
from m3agent.engine.native.kernels import sparse_attention as sa  # noqa: E402

HQ, HKV, D, TOPK = 64, 4, 128, 16
PAGE_BYTES_BF16 = HKV * 128 * 2 * D * 2
CTX = 1_048_576


def gate(dtype) -> dict:
    md = paged_md([70_000, 3000, 40_000], [8, 8, 8], num_decodes=3, decode_query_len=8, seed=3)
    return sparse_attention_gate(f"sparse_decode_attn ({dtype})", md, dtype, HQ, HKV, D, TOPK)


def run(rows: list, ceil: dict, batches=(1, 8, 64), qlens=(1, 8)) -> None:
    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        g = gate(dtype)
        pool = int(8e9 // (PAGE_BYTES_BF16 * dtype.itemsize // 2))  # ~8 GB of pages
        kv = rand_cache((pool, HKV, 128, 2 * D), dtype)
        for b in batches:
            for q in qlens:
                nl = 8
                mds = [
                    paged_md(
                        [CTX] * b,
                        [q] * b,
                        num_decodes=b,
                        decode_query_len=q,
                        pool_pages=pool,
                        seed=i,
                    )
                    for i in range(nl)
                ]
                sels = [random_selection(m, HKV, TOPK, seed=i) for i, m in enumerate(mds)]
                qs = torch.randn(mds[0].num_tokens, HQ, D, device="cuda", dtype=torch.bfloat16)
                t = mds[0].num_tokens
                default_c = sa.decode_chunks(t, HKV, TOPK)
                sweep = (4, 8, 16) if b <= 8 and q == 1 else (default_c,)
                for c in sorted(set(sweep) | {default_c}):
                    for fused in (True, False):
                        r = time_graph(
                            lambda i: sa.sparse_attention_decode(
                                qs, kv, sels[i], mds[i], D**-0.5, chunks=c, fused_merge=fused
                            ),
                            nl,
                        )
                        nbytes = t * HKV * TOPK * 128 * 2 * D * dtype.itemsize + 2 * qs.numel() * 2
                        bw = nbytes / (r["median_us"] * 1e-6) / 1e12
                        emit(
                            {
                                "name": "sparse_decode_attn",
                                "batch": b,
                                "qlen": q,
                                "kv_dtype": str(dtype).split(".")[-1],
                                "partials": c,
                                "default_partials": c == default_c,
                                "fused_merge": fused and c > 1,
                                "us": r["median_us"],
                                "p10_us": r["p10_us"],
                                "p90_us": r["p90_us"],
                                "gathered_bytes": nbytes,
                                "TBps": bw,
                                "pct_read_roofline": bw / ceil["read_TBps"],
                                "compile_s": r["compile_s"],
                                **g,
                            },
                            rows,
                        )


if __name__ == "__main__":
    main_guard(run)
