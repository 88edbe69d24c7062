"""PROTOCOL row idx_prefill: prefill index scoring + top-k, chunk 4K/16K x ctx 128K/1M, bf16
and fp8 index keys; TFLOP/s of the scoring (causal keys only) and top-k's share."""

from __future__ import annotations

# ruff: noqa: B023  (closures are called at once, inside the loop that binds them)
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from common import emit, emit_error, main_guard, paged_md, rand_cache, time_eager  # noqa: E402
from kernel_gates import selection_gate  # noqa: E402
from m3agent.engine.native.kernels import index_select  # noqa: E402

H, DI, TOPK = 4, 128, 16


def gate(dtype) -> dict:
    md = paged_md([20_000, 1500], [1024, 700], seed=5)
    cache = rand_cache((int(md.block_tables.max()) + 2, 128, DI), dtype)
    iq = torch.randn(md.num_tokens, H, DI, device="cuda").to(dtype)
    return selection_gate(f"idx_prefill ({dtype})", md, cache, iq, TOPK)


def sweep(rows: list, ceil: dict, chunk: int = 4096, ctx: int = 1_048_576) -> None:
    md = paged_md([ctx], [chunk])
    cache = rand_cache((int(md.block_tables.max()) + 1, 128, DI), torch.bfloat16)
    iq = torch.randn(chunk, H, DI, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * H * DI * float((md.positions.double() + 1).sum())
    for block_t in (16, 32, 64):
        for ns in (2, 3, 4):
            try:
                r = time_eager(
                    lambda i: index_select.index_scores(
                        iq, cache, md, block_t=block_t, num_stages=ns
                    ),
                    1,
                    3,
                )
            except Exception as exc:  # noqa: BLE001  (e.g. out of shared memory)
                emit_error("idx_prefill_sweep", exc, rows, block_t=block_t, num_stages=ns)
                continue
            emit(
                {
                    "name": "idx_prefill_sweep",
                    "chunk": chunk,
                    "ctx": ctx,
                    "block_t": block_t,
                    "num_stages": ns,
                    "score_us": r["median_us"],
                    "score_TFLOPs": flops / (r["median_us"] * 1e-6) / 1e12,
                },
                rows,
            )


def run(rows: list, ceil: dict, chunks=(4096, 16384), ctxs=(131_072, 1_048_576)) -> None:
    sweep(rows, ceil)
    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        g = gate(dtype)
        for ctx in ctxs:
            md0 = paged_md([ctx], [max(chunks)])
            cache = rand_cache((int(md0.block_tables.max()) + 1, 128, DI), dtype)
            for chunk in chunks:
                md = paged_md([ctx], [chunk])
                iq = torch.randn(chunk, H, DI, device="cuda").to(dtype)
                full = time_eager(
                    lambda i: index_select.index_select_blocks(iq, cache, md, TOPK), 1, 5
                )
                score = time_eager(lambda i: index_select.index_scores(iq, cache, md), 1, 5)
                sc = index_select.index_scores(iq, cache, md)
                topk = time_eager(lambda i: index_select.select_from_scores(sc, TOPK), 1, 5)
                keys = float((md.positions.double() + 1).sum())
                flops = 2.0 * H * DI * keys
                emit(
                    {
                        "name": "idx_prefill",
                        "chunk": chunk,
                        "ctx": ctx,
                        "index_dtype": str(dtype).split(".")[-1],
                        "us": full["median_us"],
                        "score_us": score["median_us"],
                        "topk_us": topk["median_us"],
                        "topk_share_of_scoring": topk["median_us"] / score["median_us"],
                        "score_TFLOPs": flops / (score["median_us"] * 1e-6) / 1e12,
                        "TFLOPs_incl_topk": flops / (full["median_us"] * 1e-6) / 1e12,
                        "pct_of_gemm_ceiling": flops
                        / (score["median_us"] * 1e-6)
                        / 1e12
                        / ceil["bf16_gemm_TFLOPs"],
                        "compile_s": full["compile_s"],
                        **g,
                    },
                    rows,
                )


if __name__ == "__main__":
    main_guard(run)
