"""Issue 4's GPU check and PROTOCOL rows stack_decode / ttft_cold / ttft_prefix_hit, through
the real native engine (LLMEngine: scheduler, paged KV cache with prefix caching, chunked
prefill, model runner, sampler) on an M3-shaped attention stack: 64 query heads, 4 KV heads,
head_dim 128, 4 index heads of dim 128 against one index-key head, top-k 16 blocks of 128,
MoE replaced by a small dense MLP, random bf16 weights.

  case "128k": 1 dense + 3 MSA layers, a 128K-token prompt, decode; then the same prompt
               plus 2K new tokens (prefix hit)
  case "1m":   4 MSA layers (the dense layers' quadratic prefill would take minutes at 1M),
               a 1M-token prompt admitted, chunk-prefilled and decoded; then +2K (prefix hit)

    python bench/native_long_context.py [--cases 128k,1m] [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from results_dir import add_out_arg, dated_json  # noqa: E402
from stack_model import random_init  # noqa: E402

CASES = {
    "128k": dict(prompt=131_072, layers=4, dense_layers=1, chunk=16_384, decode=64),
    "1m": dict(prompt=1_048_576, layers=4, dense_layers=0, chunk=16_384, decode=64),
}
NEW_TOKENS = 2048
HIDDEN = 2048
VOCAB = 4096


def build_model(layers: int, dense_layers: int, max_pos: int):
    from m3agent.engine.native.loaders.tiny import TinySpec, tiny_text_config
    from m3agent.engine.native.models.m3 import M3ForCausalLM

    spec = TinySpec(
        layers=layers,
        hidden=HIDDEN,
        heads=64,
        kv_heads=4,
        dense_layers=dense_layers,
        vocab=VOCAB,
        head_dim=128,
        topk_blocks=16,
        experts=1,
        experts_per_tok=1,
        intermediate=256,
        dense_intermediate=2 * HIDDEN,
        max_position_embeddings=max_pos,
    )
    c = tiny_text_config(spec, eos_id=0, bos_id=1)
    c = dataclasses.replace(c, moe_layer_freq=tuple(0 for _ in range(layers)))  # MLP, no MoE
    return random_init(M3ForCausalLM(c, dtype=torch.bfloat16, device="cuda"), "cuda")


def profile_decode(engine, prompt: list[int], path: Path) -> None:
    """torch.profiler over three decode steps of a request whose prompt is cached: where the
    time of a decode step goes (CPU-side engine work vs GPU kernels)."""
    from m3agent.engine.native.core.sampling_params import native_params
    from torch.profiler import ProfilerActivity, profile

    engine.add_request("profiled", prompt, native_params(max_tokens=8, ignore_eos=True))
    for _ in range(2):
        engine.step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            engine.step()
        torch.cuda.synchronize()
    while engine.has_unfinished_requests():
        engine.step()
    ka = prof.key_averages()
    path.write_text(
        ka.table(sort_by="self_cpu_time_total", row_limit=30)
        + "\n\n"
        + ka.table(sort_by="self_cuda_time_total", row_limit=20)
    )


def run_case(name: str, cfg: dict, out_dir: Path | None = None) -> dict:
    from m3agent.engine.native.core.block_hash import extend_block_hashes
    from m3agent.engine.native.core.engine_config import EngineConfig
    from m3agent.engine.native.core.llm_engine import LLMEngine
    from m3agent.engine.native.core.sampling_params import native_params

    total = cfg["prompt"] + NEW_TOKENS + cfg["decode"] + 512
    model = build_model(cfg["layers"], cfg["dense_layers"], max_pos=total + 1024)
    kv_bytes = (
        int(
            1.15
            * total
            / 128
            * sum(
                s.num_kv_heads * 128 * 2 * s.head_dim * 2 + 128 * s.index_dim * 2
                for s in model.cache_specs()
            )
        )
        + 2**30
    )
    engine = LLMEngine(
        model,
        None,
        EngineConfig(
            device="cuda",
            max_num_batched_tokens=cfg["chunk"],
            max_num_seqs=2,
            max_model_len=total,
            kv_cache_memory_bytes=kv_bytes,
        ),
    )
    # time the model's forward passes (synchronised) to split engine overhead from GPU work
    fwd_times: list[tuple[int, float]] = []
    inner = model.forward

    def timed_forward(input_ids, *a, **kw):
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = inner(input_ids, *a, **kw)
        torch.cuda.synchronize()
        fwd_times.append((int(input_ids.shape[0]), time.perf_counter() - t))
        return out

    model.forward = timed_forward
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(2, VOCAB, (cfg["prompt"],), generator=gen).tolist()
    t0 = time.perf_counter()
    cold = engine.generate([prompt], native_params(max_tokens=cfg["decode"], ignore_eos=True))[0]
    torch.cuda.synchronize()
    cold_wall = time.perf_counter() - t0
    m = cold.metrics
    ttft_cold = m.first_token_time - m.arrival_time
    decode_s = m.finished_time - m.first_token_time
    dec = [dt for n, dt in fwd_times if n == 1]
    prefill_fwd_s = sum(dt for n, dt in fwd_times if n > 1)
    hits = []
    for _ in range(2):  # the first hit compiles kernels for the new shapes; the second is warm
        fwd_times.clear()
        extended = prompt + torch.randint(2, VOCAB, (NEW_TOKENS,), generator=gen).tolist()
        t1 = time.perf_counter()
        hit = engine.generate([extended], native_params(max_tokens=1, ignore_eos=True))[0]
        torch.cuda.synchronize()
        hits.append((hit, time.perf_counter() - t1, sum(dt for _, dt in fwd_times)))
    hit, hit_wall, hit_fwd_s = hits[-1]
    ttft_hit = hit.metrics.first_token_time - hit.metrics.arrival_time
    first_hit = hits[0][0]
    if out_dir is not None:
        try:
            profile_decode(engine, prompt, out_dir / f"profile_decode_{name}.txt")
        except Exception as exc:  # noqa: BLE001  (a profiler hiccup must not lose the figures)
            print(f"profile failed: {exc}", flush=True)
    th = time.perf_counter()
    hashes: list[bytes] = []
    extend_block_hashes(hashes, extended, 128)
    hash_s = time.perf_counter() - th
    row = {
        "name": "native_long_context",
        "case": name,
        **cfg,
        "hidden": HIDDEN,
        "heads": 64,
        "kv_heads": 4,
        "head_dim": 128,
        "index_heads": 4,
        "index_dim": 128,
        "kv_dtype": "bfloat16",
        "kv_cache_GB": kv_bytes / 1e9,
        "cold_prompt_tokens": cold.num_prompt_tokens,
        "cold_generated": cold.num_generated_tokens,
        "ttft_cold_s": ttft_cold,
        "cold_wall_s": cold_wall,
        "prefill_tok_per_s": cfg["prompt"] / ttft_cold,
        "decode_ms_per_token": 1e3 * decode_s / max(1, cold.num_generated_tokens - 1),
        "decode_tok_per_s": max(1, cold.num_generated_tokens - 1) / decode_s,
        "hit_prompt_tokens": hit.num_prompt_tokens,
        "hit_cached_tokens": hit.num_cached_tokens,
        "ttft_prefix_hit_s": ttft_hit,
        "hit_wall_s": hit_wall,
        "ttft_speedup_hit_vs_cold": ttft_cold / ttft_hit,
        "first_hit_ttft_s": first_hit.metrics.first_token_time - first_hit.metrics.arrival_time,
        "first_hit_forward_s": hits[0][2],
        "warm_hit_forward_s": hit_fwd_s,
        "cold_prefill_forward_s": prefill_fwd_s,
        "decode_forward_ms_median": 1e3 * sorted(dec)[len(dec) // 2] if dec else None,
        "hash_ms_full_prompt": 1e3 * hash_s,
        "errors": [o.error for o in (cold, hit) if o.error],
        "max_memory_allocated_GB": torch.cuda.max_memory_allocated() / 1e9,
    }
    print(json.dumps(row), flush=True)
    del engine, model
    torch.cuda.empty_cache()
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="128k,1m")
    add_out_arg(ap)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("native_long_context needs a CUDA GPU")
    from common import env_record

    record = {"env": env_record(), "rows": [], "errors": {}}
    path = dated_json(args.out, "native_long_context", record["env"]["date"])
    for name in args.cases.split(","):
        try:
            record["rows"].append(run_case(name, CASES[name], Path(args.out)))
        except Exception as exc:  # keep the other case's figures
            import traceback

            record["errors"][name] = traceback.format_exc()[-3000:]
            print(f"[{name}] FAILED: {exc}", flush=True)
        path.write_text(json.dumps(record, indent=1))
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
