"""PROTOCOL row sparse_prefill_attn: KV-block-outer sparse prefill attention, chunk 4K/16K x
ctx 128K/1M, selections random and from the indexer; TFLOP/s on the selected work
(QK and PV over the selected, causal keys), work-list build time reported apart."""

from __future__ import annotations

# ruff: noqa: B023  (closures are called at once, inside the loop that binds them)
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from common import emit, emit_error, main_guard, paged_md, rand_cache, random_selection, time_eager  # noqa: E402
from kernel_gates import sparse_attention_gate  # noqa: E402
from m3agent.engine.native.kernels import index_select  # noqa: E402
from m3agent.engine.native.kernels import sparse_attention as sa  # noqa: E402

HQ, HKV, D, DI, TOPK = 64, 4, 128, 128, 16


def selected_flops(sel: torch.Tensor, md) -> float:
    pos = md.positions.long()[:, None, None]
    b = sel.long()
    ok = (b >= 0) & (b <= pos // 128)
    keys = torch.where(ok, torch.clamp(pos - b * 128 + 1, max=128), 0).double().sum()
    return 4.0 * D * (HQ // HKV) * float(keys)


def gate() -> dict:
    md = paged_md([20_000, 1500], [1024, 700], seed=9)
    return sparse_attention_gate("sparse_prefill_attn", md, torch.bfloat16, HQ, HKV, D, TOPK)


VARIANTS = [  # (tokens per tile, programs per SM (0: one per tile), num_warps, num_stages)
    (8, 0, 8, 2),
    (4, 0, 4, 2),
    (8, 1, 8, 2),
    (8, 2, 8, 2),
    (8, 2, 8, 3),
    (4, 2, 4, 3),
    (4, 4, 4, 3),
    (4, 4, 4, 4),
    (2, 4, 4, 3),
    (16, 1, 8, 2),
]


def sweep(rows: list, chunk: int = 4096, ctx: int = 1_048_576) -> None:
    md = paged_md([ctx], [chunk])
    pages = int(md.block_tables.max()) + 1
    kv = rand_cache((pages, HKV, 128, 2 * D), torch.bfloat16)
    q = torch.randn(chunk, HQ, D, device="cuda", dtype=torch.bfloat16)
    sel = random_selection(md, HKV, TOPK)
    flops = selected_flops(sel, md)
    ref = None
    for tt, per_sm, nw, ns in VARIANTS:
        plan = sa.prefill_plan(sel, md, HQ // HKV, tt)
        try:
            f = lambda i: sa.sparse_attention_prefill_planned(  # noqa: E731
                q,
                kv,
                sel,
                md,
                D**-0.5,
                plan,
                persistent=per_sm,
                num_warps=nw,
                num_stages=ns,
            )
            out = f(0)
            ref = out if ref is None else ref
            err = float((out.float() - ref.float()).norm() / ref.float().norm())
            r = time_eager(f, 1, 5)
        except Exception as exc:  # noqa: BLE001
            emit_error("sparse_prefill_sweep", exc, rows, variant=[tt, per_sm, nw, ns])
            continue
        emit(
            {
                "name": "sparse_prefill_sweep",
                "chunk": chunk,
                "ctx": ctx,
                "variant": {
                    "tokens_per_tile": tt,
                    "per_sm": per_sm,
                    "num_warps": nw,
                    "num_stages": ns,
                },
                "us": r["median_us"],
                "TFLOPs_selected": flops / (r["median_us"] * 1e-6) / 1e12,
                "rel_diff_vs_first_variant": err,
            },
            rows,
        )


def run(
    rows: list, ceil: dict, chunks=(4096, 16384), ctxs=(131_072, 1_048_576), tiles=(4, 8)
) -> None:
    g = gate()
    sweep(rows)
    for ctx in ctxs:
        md0 = paged_md([ctx], [max(chunks)])
        pages = int(md0.block_tables.max()) + 1
        kv = rand_cache((pages, HKV, 128, 2 * D), torch.bfloat16)
        idx = rand_cache((pages, 128, DI), torch.bfloat16)
        for chunk in chunks:
            md = paged_md([ctx], [chunk])
            q = torch.randn(chunk, HQ, D, device="cuda", dtype=torch.bfloat16)
            iq = torch.randn(chunk, HKV, DI, device="cuda", dtype=torch.bfloat16)
            sels = {
                "random": random_selection(md, HKV, TOPK),
                "indexer": index_select.index_select_blocks(iq, idx, md, TOPK),
            }
            for kind, sel in sels.items():
                flops = selected_flops(sel, md)
                for tt in tiles:
                    plan_t = time_eager(lambda i: sa.prefill_plan(sel, md, HQ // HKV, tt), 1, 3)
                    plan = sa.prefill_plan(sel, md, HQ // HKV, tt)
                    kern = time_eager(
                        lambda i: sa.sparse_attention_prefill_planned(
                            q, kv, sel, md, D**-0.5, plan
                        ),
                        1,
                        5,
                    )
                    n_work = int(plan[1][0][0].shape[0])
                    entries = int(plan[1][1][0].shape[0])
                    emit(
                        {
                            "name": "sparse_prefill_attn",
                            "chunk": chunk,
                            "ctx": ctx,
                            "selection": kind,
                            "tokens_per_tile": tt,
                            "us": kern["median_us"],
                            "plan_us": plan_t["median_us"],
                            "TFLOPs_selected": flops / (kern["median_us"] * 1e-6) / 1e12,
                            "TFLOPs_incl_plan": flops
                            / ((kern["median_us"] + plan_t["median_us"]) * 1e-6)
                            / 1e12,
                            "tile_fill": entries / (n_work * tt),
                            "work_tiles": n_work,
                            "selected_GFLOP": flops / 1e9,
                            "compile_s": kern["compile_s"],
                            **g,
                        },
                        rows,
                    )


if __name__ == "__main__":
    main_guard(run)
