"""Print the markdown table of bench/README.md from run_all JSONs (a later file's rows replace
the earlier ones' rows of the same names) and a native_long_context JSON:

    python bench/summarize.py results/bench_a.json [results/bench_b.json ...] \
        results/native_long_context_x.json"""

from __future__ import annotations

import json
import sys


def _dt(name: str) -> str:
    return {"bfloat16": "bf16", "float8_e4m3fn": "fp8"}.get(name, name)


def _pick(rows, name, **kw):
    return [r for r in rows if r["name"] == name and all(r.get(k) == v for k, v in kw.items())]


def table(bench: dict, nlc: dict | None) -> str:
    rows = bench["rows"]
    env = bench["env"]
    c = _pick(rows, "ceilings")[0]
    out = [
        f"Run {env['date']} on {env['gpu']} ({env['sm_count']} SMs), torch {env['torch']}, "
        f"triton {env['triton']}; nvidia-smi before: `{env['nvidia_smi']}`.",
        f"Ceilings measured in the same run: read {c['read_TBps']:.2f} TB/s, device copy "
        f"{c['copy_rw_TBps']:.2f} TB/s (r+w), bf16 GEMM 8192^3 {c['bf16_gemm_TFLOPs']:.0f} TFLOP/s "
        f"(drift vs PROTOCOL {100 * c['read_drift']:+.1f}% / {100 * c['gemm_drift']:+.1f}%).",
        "",
        "| row | shape | measured | target | met |",
        "|---|---|---|---|---|",
    ]

    def add(row, shape, measured, target, met):
        out.append(f"| {row} | {shape} | {measured} | {target} | {'yes' if met else '**no**'} |")

    for dt, lim in (("bfloat16", 66), ("float8_e4m3fn", 36)):
        r = _pick(rows, "idx_decode", ctx=1_048_576, batch=1, qlen=1, index_dtype=dt)
        if r:
            r = r[0]
            add(
                "idx_decode",
                f"1M, batch 1, q1, {_dt(dt)}",
                f"{r['us']:.1f} us (scoring {r['score_only_us']:.1f}, top-k {r['topk_us']:.1f}); {100 * r['pct_read_roofline']:.0f}% of read roofline",
                f"<= {lim} us",
                r["us"] <= lim,
            )
    for ctx in (524_288, 1_048_576):
        for b in (8, 64):
            for dt in ("bfloat16", "float8_e4m3fn"):
                r = _pick(rows, "idx_decode", ctx=ctx, batch=b, qlen=1, index_dtype=dt)
                if r:
                    r = r[0]
                    add(
                        "idx_decode",
                        f"{ctx // 1024}K, batch {b}, q1, {_dt(dt)}",
                        f"{r['us']:.0f} us, {100 * r['pct_read_roofline']:.0f}% of roofline",
                        ">= 90%",
                        r["pct_read_roofline"] >= 0.9,
                    )
    for r in _pick(rows, "sparse_decode_attn"):
        if r["batch"] == 1 and r["qlen"] == 1:
            add(
                "sparse_decode_attn",
                f"batch 1, q1, {_dt(r['kv_dtype'])}",
                f"{r['us']:.1f} us",
                "<= 6 us",
                r["us"] <= 6,
            )
        elif r["batch"] >= 8:
            add(
                "sparse_decode_attn",
                f"batch {r['batch']}, q{r['qlen']}, {_dt(r['kv_dtype'])}",
                f"{r['us']:.0f} us, {100 * r['pct_read_roofline']:.0f}% of roofline",
                ">= 75%",
                r["pct_read_roofline"] >= 0.75,
            )
    for r in _pick(rows, "layer_decode"):
        add(
            "layer_decode",
            f"{r['ctx'] // 1024}K, batch {r['batch']}, KV+index {_dt(r['kv_dtype'])}",
            f"{r['msa_us']:.0f} us vs dense {min(v for k, v in r['dense_us'].items() if not k.endswith('error') and v):.0f} us: {r['speedup_vs_best_dense']:.2f}x (byte bound {r['byte_bound_speedup']:.1f}x)",
            ">= 7x at 1M batch 1",
            r["speedup_vs_best_dense"] >= 7 or r["ctx"] != 1_048_576 or r["batch"] != 1,
        )
    for r in _pick(rows, "idx_prefill"):
        add(
            "idx_prefill",
            f"chunk {r['chunk'] // 1024}K, ctx {r['ctx'] // 1024}K, {_dt(r['index_dtype'])}",
            f"{r['score_TFLOPs']:.0f} TFLOP/s scoring, top-k {100 * r['topk_share_of_scoring']:.0f}% of scoring",
            ">= 550 TFLOP/s (bf16), top-k <= 10%",
            (r["score_TFLOPs"] >= 550 or r["index_dtype"] != "bfloat16")
            and r["topk_share_of_scoring"] <= 0.1,
        )
    best = {}
    for r in _pick(rows, "sparse_prefill_attn"):
        key = (r["chunk"], r["ctx"], r["selection"])
        if key not in best or r["TFLOPs_selected"] > best[key]["TFLOPs_selected"]:
            best[key] = r
    for (chunk, ctx, sel), r in sorted(best.items()):
        add(
            "sparse_prefill_attn",
            f"chunk {chunk // 1024}K, ctx {ctx // 1024}K, {sel}",
            f"{r['TFLOPs_selected']:.0f} TFLOP/s selected ({r['TFLOPs_incl_plan']:.0f} with the {r['plan_us'] / 1e3:.1f} ms work list), tile fill {100 * r['tile_fill']:.0f}%",
            ">= 400 TFLOP/s",
            r["TFLOPs_selected"] >= 400,
        )
    for r in _pick(rows, "layer_prefill_chunk"):
        add(
            "layer_prefill_chunk",
            f"4K chunk at 1M, index {_dt(r['index_dtype'])}",
            f"{r['msa_us'] / 1e3:.1f} ms vs dense {min(r['dense'][k] for k in ('cudnn', 'flash2') if r['dense'].get(k)) / 1e3:.0f} ms: {r['speedup_vs_best_dense']:.1f}x",
            ">= 25x",
            r["speedup_vs_best_dense"] >= 25,
        )
    for r in (nlc or {}).get("rows", []):
        add(
            "stack_decode (engine)",
            f"{r['case']}: {r['layers']} layers ({r['dense_layers']} dense), bf16 KV",
            f"{r['decode_ms_per_token']:.1f} ms/token ({r['decode_tok_per_s']:.0f} tok/s); model forward {r.get('decode_forward_ms_median') or 0:.1f} ms of it",
            ">= 70% of byte roofline (60 layers, fp8)",
            False,
        )
        add(
            "ttft_cold / ttft_prefix_hit (engine)",
            f"{r['case']}: {r['prompt']} tokens (+2048 new)",
            f"cold {r['ttft_cold_s']:.2f} s, warm hit {r['ttft_prefix_hit_s']:.3f} s: {r['ttft_speedup_hit_vs_cold']:.0f}x; hashing the prompt {r['hash_ms_full_prompt']:.0f} ms",
            ">= 100x; hash+lookup <= 20 ms",
            r["ttft_speedup_hit_vs_cold"] >= 100 and r["hash_ms_full_prompt"] <= 20,
        )
    return "\n".join(out)


def main(paths: list[str]) -> str:
    bench, nlc = None, None
    for p in paths:
        d = json.load(open(p))
        if any(r["name"] == "native_long_context" for r in d["rows"]):
            nlc = d
        elif bench is None:
            bench = d
        else:
            names = {r["name"] for r in d["rows"] if r["name"] != "ceilings"}
            bench["rows"] = [r for r in bench["rows"] if r["name"] not in names] + [
                r for r in d["rows"] if r["name"] in names
            ]
    return table(bench, nlc)


if __name__ == "__main__":
    print(main(sys.argv[1:]))
