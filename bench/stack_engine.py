"""PROTOCOL rows stack_decode / stack_prefill: the real LLMEngine (scheduler, paged KV cache,
model runner, CUDA-graph decode, sampler) over the 60-layer M3-shaped stack: 3 dense-attention
+ 57 MSA layers, hidden 6144, 64 query / 4 KV heads, head_dim 128, 4 index heads of dim 128
against one index-key head, top-k 16 blocks of 128, vocabulary 200064; every MLP dense at
M3's dense width 12288 (the MoE layers replaced: the engine has no grouped-expert kernel
yet), random bf16 weights.

Decode rows: B requests of C context tokens each. Their prompts are "prefilled" by writing
random K/V and index keys into every cache page and skipping the model on prefill steps
(a 60-layer prefill of B x C tokens would cost minutes of device time and does not change
what a decode step reads); decode steps then run the real model through the real engine.
Each row reports ms/step (median of timed steps), host ms/step (wall minus the time blocked
reading back the sampled tokens), kernels and launch calls per step (torch.profiler), and
the byte roofline: weights + KV + index bytes one step must read over the read bandwidth
measured in the same run.

Prefill row: one real 128K-token prompt through the engine (chunked), tokens/s, and the share
of the bf16 GEMM ceiling (same run) that its linear-layer FLOPs alone would need.

  python bench/stack_engine.py --out DIR [--cases b1_32k_bf16,...] [--legacy-root DIR]

--legacy-root: also run the decode cases named by --legacy-cases with the code checked out
in DIR (an older commit; same script, in a subprocess), for before/after in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_dir import add_out_arg, dated_json  # noqa: E402
from stack_cases import decode_case, free_memory, prefill_case  # noqa: E402
from stack_model import SHAPE, build_model  # noqa: E402

# name -> (batch, context tokens, kv dtype, eager)
CASES = {
    "b1_32k_bf16_eager": (1, 32768, "auto", True),
    "b8_32k_bf16_eager": (8, 32768, "auto", True),
    "b1_32k_bf16": (1, 32768, "auto", False),
    "b8_32k_bf16": (8, 32768, "auto", False),
    "b1_128k_bf16": (1, 131072, "auto", False),
    "b1_32k_fp8": (1, 32768, "fp8", False),
    "b8_32k_fp8": (8, 32768, "fp8", False),
    "b32_32k_fp8": (32, 32768, "fp8", False),
    "b1_128k_fp8": (1, 131072, "fp8", False),
    "b8_128k_fp8": (8, 131072, "fp8", False),
    "b1_1m_fp8": (1, 1048576, "fp8", False),
}
DEFAULT_CASES = ",".join(n for n in CASES if n != "b8_32k_bf16_eager")


def legacy_rows(root: str, cases: str, shape_args: list[str], prefill: bool) -> list[dict]:
    """The same decode cases with an older checkout's engine (its own process)."""
    farm = Path("/tmp/legacy_farm/m3agent")
    farm.mkdir(parents=True, exist_ok=True)
    for pkg in ("app", "engine", "agent", "tools"):
        link = farm / pkg
        if not link.exists():
            link.symlink_to(Path(root).resolve() / pkg)
    env = dict(os.environ, PYTHONPATH=str(farm.parent))
    cmd = [
        sys.executable,
        str(Path(root) / "bench" / "stack_engine.py"),
        "--cases",
        cases,
        *([] if prefill else ["--no-prefill"]),
        "--no-ceilings",
        "--read-tbps",
        os.environ.get("_READ_TBPS", "0"),
        "--json-only",
        *shape_args,
    ]
    if not (Path(root) / "bench" / "stack_engine.py").exists():
        cmd[1] = str(Path(__file__).resolve())  # this script, driving the old engine
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    rows = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    for r in rows:
        r["code"] = "legacy"
    if p.returncode:
        rows.append({"name": "legacy_error", "stderr": p.stderr[-3000:]})
    return rows


def record_failure(record: dict, key: str, label: str, exc: Exception) -> None:
    """The traceback under record["errors"][key], a line on stdout; the other cases still
    run (call it inside the except block)."""
    record["errors"][key] = traceback.format_exc()[-3000:]
    print(f"[{label}] FAILED: {exc}", flush=True)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=DEFAULT_CASES)
    add_out_arg(ap)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--layers", type=int, default=SHAPE["layers"])
    ap.add_argument("--hidden", type=int, default=SHAPE["hidden"])
    ap.add_argument("--vocab", type=int, default=SHAPE["vocab"])
    ap.add_argument("--inter", type=int, default=SHAPE["dense_intermediate"])
    ap.add_argument("--prefill-ctx", type=int, default=131072)
    ap.add_argument("--ctx", type=int, default=0, help="override every case's context (smoke)")
    ap.add_argument("--no-prefill", action="store_true")
    ap.add_argument("--no-ceilings", action="store_true")
    ap.add_argument("--read-tbps", type=float, default=0.0)
    ap.add_argument("--json-only", action="store_true")
    ap.add_argument("--legacy-root", default=None)
    ap.add_argument("--legacy-cases", default="b1_32k_bf16_eager,b8_32k_bf16_eager")
    ap.add_argument("--legacy-prefill", action="store_true")
    ap.add_argument("--moe-experts", type=int, default=8)
    ap.add_argument("--moe-cases", default="", help="e.g. b1_32k_bf16,b8_32k_bf16")
    ap.add_argument("--profile", default="b1_32k_bf16_eager,b1_32k_bf16,b8_32k_bf16")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    shape = dict(
        SHAPE,
        layers=args.layers,
        hidden=args.hidden,
        vocab=args.vocab,
        dense_intermediate=args.inter,
        dense_layers=min(3, args.layers),
    )
    shape_args = [
        "--layers",
        str(args.layers),
        "--hidden",
        str(args.hidden),
        "--vocab",
        str(args.vocab),
        "--inter",
        str(args.inter),
        "--device",
        args.device,
        "--ctx",
        str(args.ctx),
    ]
    record: dict = {"shape": shape, "rows": [], "errors": {}}
    if args.device == "cuda":
        from common import ceilings, env_record

        record["env"] = env_record()
    else:
        record["env"] = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "device": args.device}
    read_tbps, gemm = args.read_tbps or None, None
    if args.device == "cuda" and not args.no_ceilings:
        ceil = ceilings(record["rows"])
        read_tbps, gemm = ceil["read_TBps"], ceil["bf16_gemm_TFLOPs"]
    path = dated_json(args.out, "stack_engine", record["env"]["date"])

    def save() -> None:
        if not args.json_only:
            path.write_text(json.dumps(record, indent=1))

    names = [n for n in args.cases.split(",") if n]
    if args.ctx:
        for n in CASES:
            CASES[n] = (CASES[n][0], args.ctx, *CASES[n][2:])
    moe_names = [n for n in args.moe_cases.split(",") if n]
    max_ctx = max(
        [CASES[n][1] for n in names + moe_names] + [args.prefill_ctx if not args.no_prefill else 0]
    )
    t = time.perf_counter()
    model = build_model(shape, args.device, max_pos=max_ctx + 4096)
    record["model_build_s"] = time.perf_counter() - t
    record["params"] = sum(p.numel() for p in model.parameters())
    profiles = set(args.profile.split(","))
    for name in names:
        batch, ctx, kv, eager = CASES[name]
        try:
            record["rows"].append(
                decode_case(
                    model, name, batch, ctx, kv, eager, args.device, read_tbps, name in profiles
                )
            )
        except Exception as exc:  # keep the other cases' figures
            record_failure(record, name, name, exc)
        free_memory(args.device)
        save()
    if not args.no_prefill:
        try:
            record["rows"].append(prefill_case(model, args.prefill_ctx, args.device, gemm))
        except Exception as exc:
            record_failure(record, "prefill", "prefill", exc)
        save()
    if args.moe_cases:
        del model
        free_memory(args.device)
        model = build_model(
            shape, args.device, max_pos=max_ctx + 4096, moe_experts=args.moe_experts
        )
        record["moe_params"] = sum(p.numel() for p in model.parameters())
        for name in moe_names:
            batch, ctx, kv, eager = CASES[name]
            try:
                row = decode_case(model, name, batch, ctx, kv, eager, args.device, read_tbps, False)
                row.update(case=f"moe{args.moe_experts}_{name}", moe_experts=args.moe_experts)
                record["rows"].append(row)
            except Exception as exc:
                record_failure(record, f"moe_{name}", f"moe {name}", exc)
            free_memory(args.device)
            save()
    if args.legacy_root:
        del model
        free_memory(args.device)
        os.environ["_READ_TBPS"] = str(read_tbps or 0)
        try:
            record["rows"] += legacy_rows(
                args.legacy_root,
                args.legacy_cases,
                shape_args,
                not args.no_prefill and args.legacy_prefill,
            )
        except Exception as exc:
            record["errors"]["legacy"] = repr(exc)
        for r in record["rows"]:
            if r.get("code") == "legacy":
                print(json.dumps(r), flush=True)
        save()
    if not args.json_only:
        print(f"wrote {path}", flush=True)
        for r in record["rows"]:
            print(summary(r), flush=True)
        for k, v in record["errors"].items():
            print(f"ERROR {k}: {v.splitlines()[-1] if v else v}", flush=True)


def summary(r: dict) -> str:
    f = lambda k, fmt="{:.2f}": fmt.format(r[k]) if r.get(k) is not None else "-"  # noqa: E731
    if r.get("name") == "stack_decode":
        return (
            f"{r.get('code', 'new'):6} {r['case']:18} {f('ms_per_step')} ms/step "
            f"(p10 {f('p10_ms')} p90 {f('p90_ms')}) host {f('host_ms_per_step')} ms "
            f"roofline {f('roofline_ms')} ms share {f('roofline_share', '{:.1%}')} "
            f"ops/step {f('gpu_ops_per_step', '{:.0f}')} "
            f"launch calls {f('kernel_launch_calls_per_step', '{:.0f}')} "
            f"graphs {r.get('cuda_graphs')} {r.get('graphs_disabled') or ''}"
        )
    if r.get("name") == "stack_prefill":
        return (
            f"prefill {r['context']} tok: {f('seconds')} s, {f('tok_per_s', '{:.0f}')} "
            f"tok/s, GEMM-ceiling share {f('gemm_ceiling_share', '{:.1%}')}"
        )
    if r.get("name") == "ceilings":
        return (
            f"ceilings: read {r['read_TBps']:.2f} TB/s, copy {r['copy_rw_TBps']:.2f}, "
            f"gemm {r['bf16_gemm_TFLOPs']:.0f} TFLOP/s"
        )
    return json.dumps(r)[:600]


if __name__ == "__main__":
    main()
