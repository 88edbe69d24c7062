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
import dataclasses
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

SHAPE = dict(
    layers=60,
    dense_layers=3,
    hidden=6144,
    heads=64,
    kv_heads=4,
    head_dim=128,
    topk_blocks=16,
    vocab=200064,
    dense_intermediate=12288,
)
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
WARM_STEPS = 4
TIMED_STEPS = 24
PROFILED_STEPS = 3


def build_model(shape: dict, device: str, max_pos: int, moe_experts: int = 0):
    from m3agent.engine.native.loaders.tiny import TinySpec, tiny_text_config
    from m3agent.engine.native.models.m3 import M3ForCausalLM

    spec = TinySpec(
        layers=shape["layers"],
        hidden=shape["hidden"],
        heads=shape["heads"],
        kv_heads=shape["kv_heads"],
        dense_layers=shape["dense_layers"],
        vocab=shape["vocab"],
        head_dim=shape["head_dim"],
        topk_blocks=shape["topk_blocks"],
        experts=max(1, moe_experts),
        experts_per_tok=4 if moe_experts else 1,
        intermediate=3072 if moe_experts else 256,
        dense_intermediate=shape["dense_intermediate"],
        max_position_embeddings=max_pos,
    )
    c = tiny_text_config(spec, eos_id=0, bos_id=1)
    if not moe_experts:  # every MLP dense; else layers 3.. are MoE (E experts, top-4, shared)
        c = dataclasses.replace(c, moe_layer_freq=tuple(0 for _ in range(shape["layers"])))
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = M3ForCausalLM(c, dtype=dtype, device=device)
    g = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02, generator=g)
    return model


def fill_caches(caches, seed: int = 0) -> None:
    """Random K/V and index keys in every page (bf16 normals, cast to the cache dtype)."""
    g = torch.Generator(device=caches[0].kv.device).manual_seed(seed)
    for c in caches:
        for t in (c.kv, c.index):
            if t is None:
                continue
            for chunk in t.split(max(1, 2**28 // max(1, t[0].numel())), dim=0):
                chunk.copy_(
                    torch.randn(chunk.shape, generator=g, device=t.device, dtype=torch.bfloat16)
                )


def skip_prefill(engine) -> None:
    """Prefill steps return a token without running the model (the caches already hold
    random context); decode steps run the real model."""
    from m3agent.engine.native.runner.model_runner import ModelRunnerOutput

    runner = engine.runner
    inner = runner.execute_model

    def execute(out):
        if out.num_decodes < len(out.scheduled):
            return ModelRunnerOutput({r.request_id: 5 for r in out.scheduled if r.samples})
        return inner(out)

    runner.execute_model = execute


def step_bytes(model, batch: int, ctx: int, cache_elem: int) -> dict:
    """Bytes one decode step must read: every weight once (the embedding: B rows), and per
    request the dense layers' whole K/V, the MSA layers' index keys and 16 selected pages.
    Routed experts: the expected number a batch touches under uniform routing,
    E * (1 - (1 - k/E)^B), of the E experts each layer holds."""
    c = model.config
    n_exp, k_exp = c.num_local_experts, c.num_experts_per_tok
    touched = n_exp * (1 - (1 - k_exp / n_exp) ** batch) / n_exp
    w = 0
    for name, p in model.named_parameters():
        if "embed_tokens" in name:
            w += batch * p.shape[1] * p.element_size()
        elif ".experts." in name:
            w += touched * p.numel() * p.element_size()
        else:
            w += p.numel() * p.element_size()
    hkv, d = c.num_key_value_heads, c.head_dim
    di = c.sparse_attention_config.sparse_index_dim
    topk = c.sparse_attention_config.sparse_topk_blocks
    n_dense = sum(not c.is_sparse_layer(i) for i in range(c.num_hidden_layers))
    n_msa = c.num_hidden_layers - n_dense
    kv_tok = hkv * 2 * d * cache_elem
    blocks = -(-ctx // 128)
    kv = batch * (
        n_dense * ctx * kv_tok + n_msa * (ctx * di * cache_elem + min(topk, blocks) * 128 * kv_tok)
    )
    return {"weight_bytes": w, "kv_index_bytes": kv, "total_bytes": w + kv}


def count_launches(engine, steps: int, table_path: Path | None = None) -> dict:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            engine.step()
        torch.cuda.synchronize()
    kernels = launches = graphs = 0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels += 1
        elif e.name in (
            "cudaLaunchKernel",
            "cuLaunchKernel",
            "cuLaunchKernelEx",
            "cudaLaunchKernelExC",
        ):
            launches += 1
        elif e.name == "cudaGraphLaunch":
            graphs += 1
    if table_path is not None:  # where a step's GPU time goes, kernel by kernel
        table_path.write_text(
            prof.key_averages().table(
                sort_by="cuda_time_total", row_limit=40, max_name_column_width=70
            )
        )
    return {
        "gpu_ops_per_step": kernels / steps,
        "kernel_launch_calls_per_step": launches / steps,
        "graph_launches_per_step": graphs / steps,
    }


def decode_case(
    model,
    name: str,
    batch: int,
    ctx: int,
    kv: str,
    eager: bool,
    device: str,
    read_tbps: float | None,
    profile_it: bool,
) -> dict:
    from m3agent.engine.native.core.engine_config import EngineConfig
    from m3agent.engine.native.core.llm_engine import LLMEngine
    from m3agent.engine.native.core.sampling_params import TokenSamplingParams
    from m3agent.engine.native.runner.kv_cache_allocator import bytes_per_block

    steps = WARM_STEPS + TIMED_STEPS + (PROFILED_STEPS if profile_it else 0) + 2
    max_len = ctx + steps + 128
    cache_dtype = torch.float8_e4m3fn if kv == "fp8" else model.info.dtype
    blocks = batch * -(-max_len // 128) + 2
    kw = dict(
        device=device,
        max_num_batched_tokens=16384,
        max_num_seqs=batch,
        max_model_len=max_len,
        kv_cache_memory_bytes=blocks * bytes_per_block(model.cache_specs(), cache_dtype),
    )
    fields = {f.name for f in dataclasses.fields(EngineConfig)}
    if "kv_cache_dtype" in fields:
        kw.update(kv_cache_dtype=kv, enforce_eager=eager)
    elif kv != "auto":
        raise RuntimeError("this checkout has no kv_cache_dtype")
    engine = LLMEngine(model, None, EngineConfig(**kw))
    fill_caches(engine.runner.caches)
    skip_prefill(engine)
    gen = torch.Generator().manual_seed(1)
    for i in range(batch):
        prompt = torch.randint(2, min(4096, model.info.vocab_size), (ctx,), generator=gen).tolist()
        # never finishes inside the run: the first request decodes while the others are
        # still (skip-)prefilling
        engine.add_request(
            f"r{i}", prompt, TokenSamplingParams(max_tokens=100_000, ignore_eos=True)
        )
    while any(
        r.num_computed_tokens < r.num_prompt_tokens for r in engine.scheduler.requests.values()
    ):
        engine.step()  # the skipped prefill steps, until every request decodes
    t0 = time.perf_counter()
    for _ in range(WARM_STEPS):  # captures the graphs, compiles the kernels
        engine.step()
    if device == "cuda":
        torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    walls, hosts = [], []
    runner = engine.runner
    for _ in range(TIMED_STEPS):
        t = time.perf_counter()
        outs = engine.step()
        dt = time.perf_counter() - t
        walls.append(dt)
        hosts.append(dt - getattr(runner, "last_sync_wait_s", 0.0))
        assert len(outs) == batch and not any(o.error for o in outs), [o.error for o in outs]
    table = Path(os.environ["OUT"]) / f"kernels_{name}.txt" if os.environ.get("OUT") else None
    launches = (
        count_launches(engine, PROFILED_STEPS, table) if profile_it and device == "cuda" else {}
    )
    cache_elem = torch.empty((), dtype=cache_dtype).element_size()
    by = step_bytes(model, batch, ctx + WARM_STEPS + TIMED_STEPS // 2, cache_elem)
    ms = 1e3 * statistics.median(walls)
    s = sorted(walls)
    row = {
        "name": "stack_decode",
        "case": name,
        "batch": batch,
        "context": ctx,
        "kv_cache_dtype": kv,
        "cuda_graphs": getattr(runner, "graphs", None) is not None,
        "ms_per_step": ms,
        "p10_ms": 1e3 * s[len(s) // 10],
        "p90_ms": 1e3 * s[(9 * len(s)) // 10],
        "tok_per_s": batch / (ms / 1e3),
        "host_ms_per_step": (
            1e3 * statistics.median(hosts) if hasattr(runner, "last_sync_wait_s") else None
        ),
        "warm_steps_s": warm_s,
        **by,
        **launches,
    }
    graphs = getattr(runner, "graphs", None)
    if graphs is not None:
        row["graph_captures"] = graphs.num_captures
        row["graphs_disabled"] = graphs.disabled
    if read_tbps:
        row["roofline_ms"] = by["total_bytes"] / (read_tbps * 1e12) * 1e3
        row["roofline_share"] = row["roofline_ms"] / ms
    print(json.dumps(row), flush=True)
    del engine, runner
    free_memory(device)
    return row


def free_memory(device: str) -> None:
    gc.collect()  # skip_prefill's wrapper makes the runner a cycle: the caches wait for gc
    if device == "cuda":
        torch.cuda.empty_cache()


def prefill_case(model, ctx: int, device: str, gemm_tflops: float | None) -> dict:
    from m3agent.engine.native.core.engine_config import EngineConfig
    from m3agent.engine.native.core.llm_engine import LLMEngine
    from m3agent.engine.native.core.sampling_params import TokenSamplingParams
    from m3agent.engine.native.runner.kv_cache_allocator import bytes_per_block

    max_len = ctx + 256
    blocks = -(-max_len // 128) + 4
    engine = LLMEngine(
        model,
        None,
        EngineConfig(
            device=device,
            max_num_batched_tokens=16384,
            max_num_seqs=1,
            max_model_len=max_len,
            kv_cache_memory_bytes=blocks * bytes_per_block(model.cache_specs(), model.info.dtype),
        ),
    )
    prompt = torch.randint(
        2, min(4096, model.info.vocab_size), (ctx,), generator=torch.Generator().manual_seed(2)
    ).tolist()
    # warm: compile the prefill kernels on a short prompt first
    engine.generate(
        [prompt[: min(20000, ctx // 2)]], TokenSamplingParams(max_tokens=1, ignore_eos=True)
    )
    engine.kv_cache_manager.reset_prefix_cache()
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = engine.generate([prompt], TokenSamplingParams(max_tokens=1, ignore_eos=True))[0]
    if device == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t
    lin = sum(
        p.numel()
        for n, p in model.named_parameters()
        if p.dim() == 2 and "embed_tokens" not in n and "lm_head" not in n
    )
    gemm_flops = 2 * ctx * lin
    row = {
        "name": "stack_prefill",
        "context": ctx,
        "chunk": 16384,
        "seconds": dt,
        "tok_per_s": ctx / dt,
        "cached_tokens": out.num_cached_tokens,
        "linear_flops": gemm_flops,
        "error": out.error,
    }
    if gemm_tflops:
        row["gemm_ceiling_share"] = gemm_flops / (gemm_tflops * 1e12) / dt
    print(json.dumps(row), flush=True)
    del engine
    free_memory(device)
    return row


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument(
        "--out", default=os.environ.get("OUT") or str(Path(__file__).parent / "results")
    )
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
    args = ap.parse_args()
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
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"stack_engine_{record['env']['date'][:10]}.json"

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
            import traceback

            record["errors"][name] = traceback.format_exc()[-3000:]
            print(f"[{name}] FAILED: {exc}", flush=True)
            del exc
        free_memory(args.device)
        save()
    if not args.no_prefill:
        try:
            record["rows"].append(prefill_case(model, args.prefill_ctx, args.device, gemm))
        except Exception as exc:
            import traceback

            record["errors"]["prefill"] = traceback.format_exc()[-3000:]
            print(f"[prefill] FAILED: {exc}", flush=True)
            del exc
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
                import traceback

                record["errors"][f"moe_{name}"] = traceback.format_exc()[-3000:]
                print(f"[moe {name}] FAILED: {exc}", flush=True)
                del exc
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
