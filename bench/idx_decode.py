"""PROTOCOL row idx_decode: decode index scoring + top-k, ctx 32K..1M, batch 1/8/64, query
length 1/8, bf16 and fp8 index keys; us and % of the measured read roofline."""
# ruff: noqa: B023  (closures are called at once, inside the loop that binds them)

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from common import emit, main_guard, paged_md, rand_cache, time_graph  # noqa: E402
from kernel_gates import selection_gate  # noqa: E402
from m3agent.engine.native.kernels import index_select  # noqa: E402

H, DI, TOPK = 4, 128, 16
CTXS = [32_768, 131_072, 524_288, 1_048_576]
BATCHES = [1, 8, 64]
QLENS = [1, 8]


def gate(dtype) -> dict:
    md = paged_md([70_000, 3000, 40_000], [8, 8, 8], num_decodes=3, decode_query_len=8, seed=7)
    cache = rand_cache((md.block_tables.max().item() + 2, 128, DI), dtype)
    iq = torch.randn(md.num_tokens, H, DI, device="cuda", dtype=torch.bfloat16)
    return selection_gate(f"idx_decode ({dtype})", md, cache, iq, TOPK)


def sweep(rows: list, ceil: dict) -> None:
    """Blocks per program and pipeline depth of the scoring kernel at batch 1."""
    for ctx in (32_768, 1_048_576):
        md = paged_md([ctx], [1], num_decodes=1)
        pages = int(md.block_tables.max()) + 1
        nl = 2 if ctx > 500_000 else 8
        caches = [rand_cache((pages, 128, DI), torch.bfloat16) for _ in range(nl)]
        iq = torch.randn(1, H, DI, device="cuda", dtype=torch.bfloat16)
        nbytes = pages * 128 * DI * 2
        for bps in (1, 2, 4, 8) if ctx < 500_000 else (8, 16, 21, 28, 32, 42, 64):
            for ns in (2, 3):
                r = time_graph(
                    lambda i: index_select.index_scores(iq, caches[i], md, bps=bps, num_stages=ns),
                    nl,
                )
                emit(
                    {
                        "name": "idx_decode_sweep",
                        "ctx": ctx,
                        "bps": bps,
                        "num_stages": ns,
                        "score_us": r["median_us"],
                        "pct_read_roofline": nbytes
                        / (r["median_us"] * 1e-6)
                        / 1e12
                        / ceil["read_TBps"],
                    },
                    rows,
                )


def run(rows: list, ceil: dict, ctxs=CTXS, batches=BATCHES, qlens=QLENS) -> None:
    sweep(rows, ceil)
    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        g = gate(dtype)
        esz = dtype.itemsize
        for ctx in ctxs:
            for b in batches:
                if b * ctx * DI * esz > 20e9:
                    continue
                for q in qlens:
                    md = paged_md([ctx] * b, [q] * b, num_decodes=b, decode_query_len=q)
                    layer_bytes = sum((s + 127) // 128 for s in md.seq_lens_cpu) * 128 * DI * esz
                    nl = max(2, min(8, int(2.5 * 2 * 60 * 2**20 // layer_bytes) + 1))
                    pages = int(md.block_tables.max()) + 1
                    caches = [rand_cache((pages, 128, DI), dtype) for _ in range(nl)]
                    iq = torch.randn(md.num_tokens, H, DI, device="cuda").to(dtype)
                    full = time_graph(
                        lambda i: index_select.index_select_blocks(iq, caches[i], md, TOPK), nl
                    )
                    score = time_graph(lambda i: index_select.index_scores(iq, caches[i], md), nl)
                    bw = layer_bytes / (full["median_us"] * 1e-6) / 1e12
                    emit(
                        {
                            "name": "idx_decode",
                            "ctx": ctx,
                            "batch": b,
                            "qlen": q,
                            "index_dtype": str(dtype).split(".")[-1],
                            "us": full["median_us"],
                            "p10_us": full["p10_us"],
                            "p90_us": full["p90_us"],
                            "score_only_us": score["median_us"],
                            "topk_us": full["median_us"] - score["median_us"],
                            "bytes": layer_bytes,
                            "TBps": bw,
                            "pct_read_roofline": bw / ceil["read_TBps"],
                            "score_pct_roofline": layer_bytes
                            / (score["median_us"] * 1e-6)
                            / 1e12
                            / ceil["read_TBps"],
                            "compile_s": full["compile_s"],
                            "layers_rotated": nl,
                            **g,
                        },
                        rows,
                    )
                    caches.clear()


if __name__ == "__main__":
    main_guard(run)
