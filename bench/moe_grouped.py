"""PROTOCOL row moe_grouped: the grouped-expert kernel (kernels/moe_grouped.py) at M3's
shape, 128 experts of 6144 -> 3072 (gate | up) -> 6144, top-4, router kernel first; weights
bf16, FP8 with 128x128 block scales, MXFP8 (e8m0 per 1x32). Routed experts only (the shared
expert is one dense 6144x3072 MLP beside it).

Decode (T = 1 / 8 / 32 tokens): GB/s of the expert weights the step touches (unique experts
x 113 MB in bf16, 57 MB + scales in fp8) as CUDA-graph replays, against the read bandwidth
measured in the same run. Prefill (T = 4096): TFLOP/s (2 x pairs x 3 x 6144 x 3072) against
the bf16 GEMM ceiling. Baseline: the torch per-expert loop (the CPU path) on the same data.

    python bench/moe_grouped.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from results_dir import add_out_arg, dated_json  # noqa: E402

E, H, INTER, TOPK = 128, 6144, 3072, 4


def make_weights(fmt: str, seed: int = 0):
    """w13 [E, 2I, H], w2 [E, H, I] in the format, and their scales."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for n, k in ((2 * INTER, H), (H, INTER)):
        w = torch.empty(E, n, k, device="cuda", dtype=torch.bfloat16)
        for e in range(E):  # one expert at a time: no fp32 copy of 14 GB
            w[e].normal_(0.0, k**-0.5, generator=g)
        if fmt == "bf16":
            out += [w, None]
            continue
        if fmt == "fp8":
            wb = w.view(E, n // 128, 128, k // 128, 128)
            s = wb.abs().amax(dim=(2, 4)).float().clamp(min=1e-12) / 448.0
            q = torch.empty(E, n, k, device="cuda", dtype=torch.float8_e4m3fn)
            for e in range(E):
                q[e] = (wb[e].float() / s[e][:, None, :, None]).view(n, k).to(q.dtype)
            out += [q, s]
        else:
            gb = w.view(E, n, k // 32, 32)
            ex = torch.ceil(torch.log2(gb.abs().amax(-1).float().clamp(min=1e-30) / 448.0))
            ex = ex.clamp(-127, 127)
            q = torch.empty(E, n, k, device="cuda", dtype=torch.float8_e4m3fn)
            for e in range(E):
                q[e] = (
                    (gb[e].float() / torch.exp2(ex[e])[..., None])
                    .clamp(-448, 448)
                    .view(n, k)
                    .to(q.dtype)
                )
            out += [q, (ex + 127).to(torch.uint8)]
        del w
    return out


def torch_loop(x, w13, w2, w, ids):
    """The layer's CPU path on the GPU (bf16 only): one pair of GEMMs per routed expert."""
    from m3agent.engine.native.layers.mlp import swiglu_oai_merged

    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in torch.unique(ids).tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        a = swiglu_oai_merged(x[tok] @ w13[e].T)
        out.index_add_(0, tok, (a @ w2[e].T).float() * w[tok, slot][:, None])
    return out


def run_format(fmt: str, tokens: list[int], ceil: dict, gate, record: dict, path) -> None:
    from common import emit, time_eager, time_graph
    from m3agent.engine.native.kernels import moe_grouped, moe_router
    from m3agent.engine.native.kernels.checks import rel_error

    w13, s13, w2, s2 = make_weights(fmt)
    elem = 2 if fmt == "bf16" else 1
    scale_bytes_per_expert = (
        0
        if s13 is None
        else (s13[0].numel() * s13.element_size() + s2[0].numel() * s2.element_size())
    )
    expert_bytes = 3 * H * INTER * elem + scale_bytes_per_expert
    for t in tokens:
        try:
            x = torch.randn(t, H, device="cuda", dtype=torch.bfloat16)
            logits = x.float() @ gate.T
            w, ids = moe_router.route(logits, None, TOPK, 2.5)

            def run(_i, x=x, w=w, ids=ids):
                return moe_grouped.grouped_moe(
                    x, w13, w2, w, ids, fmt=fmt, w13_scale=s13, w2_scale=s2
                )

            got = run(0)
            if t <= 32:  # correctness gate (the fp32 loop is slow at 4096)
                ref = moe_grouped.reference(x, w13, w2, w, ids, fmt=fmt, w13_scale=s13, w2_scale=s2)
                rel, cos = rel_error(got, ref)
                if not (rel <= 1e-2 and cos >= 0.9999):
                    raise AssertionError(f"moe {fmt} T={t}: rel {rel:.2e} cos {cos:.6f}")
            timing = time_graph(run, 1, 30)
            us = timing["median_us"]
            uniq = int(torch.unique(ids).numel())
            row = {
                "name": "moe_grouped",
                "fmt": fmt,
                "tokens": t,
                "top_k": TOPK,
                "experts": E,
                "unique_experts": uniq,
                **timing,
            }
            if t <= 32:
                row.update(rel=rel, cos=cos)
                gbps = uniq * expert_bytes / (us * 1e-6) / 1e9
                row.update(expert_GBps=gbps, read_roofline_share=gbps / (ceil["read_TBps"] * 1e3))
            else:
                flops = 2 * t * TOPK * 3 * H * INTER
                tf = flops / (us * 1e-6) / 1e12
                row.update(TFLOPs=tf, gemm_ceiling_share=tf / ceil["bf16_gemm_TFLOPs"])
            if fmt == "bf16" and t in (1, 4096):
                base = time_eager(
                    lambda _i, x=x, w=w, ids=ids: torch_loop(x, w13, w2, w, ids.long()), 1, 5
                )
                row.update(
                    torch_loop_us=base["median_us"], speedup_vs_torch_loop=base["median_us"] / us
                )
            emit(row, record["rows"])
        except Exception as exc:  # keep the other rows
            record["errors"][f"{fmt}_T{t}"] = repr(exc)[:2000]
            print(f"[{fmt} T={t}] FAILED: {exc!r}"[:2000], flush=True)
        path.write_text(json.dumps(record, indent=1))


def tile_sweep(record: dict) -> None:
    """Decode T=1 and T=8 with other tile shapes (BM, BN, BK, warps, stages), bf16."""
    from common import emit, time_graph
    from m3agent.engine.native.kernels import moe_grouped, moe_router

    w13, _, w2, _ = make_weights("bf16", seed=1)
    gate = torch.randn(E, H, device="cuda") * H**-0.5
    for t in (1, 8):
        x = torch.randn(t, H, device="cuda", dtype=torch.bfloat16)
        w, ids = moe_router.route(x.float() @ gate.T, None, TOPK, 2.5)
        uniq = int(torch.unique(ids).numel())
        for tiles in (
            (16, 64, 128, 4, 4),
            (16, 32, 256, 4, 3),
            (16, 64, 256, 4, 3),
            (16, 128, 128, 4, 4),
            (16, 32, 128, 2, 4),
            (16, 64, 128, 4, 6),
        ):

            def run(_i, x=x, w=w, ids=ids, tiles=tiles):
                p = x.shape[0] * TOPK
                si, be = moe_grouped.align(ids, E, tiles[0])
                gu = moe_grouped.grouped_gemm(
                    x, w13, None, "bf16", si, be, p, TOPK, True, None, x.dtype, tiles
                )
                a = moe_grouped.swiglu_oai_merged(gu)
                return moe_grouped.grouped_gemm(
                    a,
                    w2,
                    None,
                    "bf16",
                    si,
                    be,
                    p,
                    TOPK,
                    False,
                    w.reshape(-1).contiguous(),
                    torch.float32,
                    tiles,
                )

            tm = time_graph(run, 1, 30)
            gbps = uniq * 3 * H * INTER * 2 / (tm["median_us"] * 1e-6) / 1e9
            emit(
                {
                    "name": "moe_tile_sweep",
                    "tokens": t,
                    "tiles": tiles,
                    "unique": uniq,
                    **tm,
                    "expert_GBps": gbps,
                },
                record["rows"],
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    add_out_arg(ap)
    ap.add_argument("--tokens", default="1,8,32,4096")
    ap.add_argument("--sweep-only", action="store_true")
    args = ap.parse_args()
    from common import ceilings, env_record
    from m3agent.engine.native.kernels import moe_grouped

    record = {"env": env_record(), "rows": [], "errors": {}}
    ceil = ceilings(record["rows"])
    path = dated_json(args.out, "moe_grouped", record["env"]["date"])
    gate = torch.randn(E, H, device="cuda") * H**-0.5
    if args.sweep_only:
        tile_sweep(record)
        path.write_text(json.dumps(record, indent=1))
        for r in record["rows"]:
            if r["name"] == "moe_tile_sweep":
                print(
                    f"sweep T={r['tokens']} {r['tiles']}: {r['median_us']:.1f} us "
                    f"{r['expert_GBps']:.0f} GB/s",
                    flush=True,
                )
        return
    for fmt in moe_grouped.FORMATS:
        run_format(fmt, [int(v) for v in args.tokens.split(",")], ceil, gate, record, path)
        torch.cuda.empty_cache()
    for r in record["rows"]:
        if r.get("name") == "moe_grouped":
            fig = (
                f"{r['expert_GBps']:.0f} GB/s ({r['read_roofline_share']:.0%} of read)"
                if "expert_GBps" in r
                else f"{r['TFLOPs']:.0f} TFLOP/s ({r['gemm_ceiling_share']:.0%} of GEMM)"
            )
            base = (
                f", torch loop {r['torch_loop_us']:.0f} us ({r['speedup_vs_torch_loop']:.1f}x)"
                if "torch_loop_us" in r
                else ""
            )
            print(
                f"moe {r['fmt']:6} T={r['tokens']:5} {r['median_us']:9.1f} us  {fig}"
                f"  uniq {r['unique_experts']}{base}",
                flush=True,
            )
    print(json.dumps(record["errors"])[:1500])


if __name__ == "__main__":
    main()
