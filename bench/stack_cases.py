"""One stack_engine.py row each: a decode case (B requests of C context tokens through the
real LLMEngine, skip-prefilled, then timed decode steps, kernel and launch counts, the byte
roofline) and the 128K prefill case. Imported by name: the scripts put this folder on their
path."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import statistics
import time
from pathlib import Path

import torch
from stack_model import fill_caches, skip_prefill, step_bytes

WARM_STEPS = 4
TIMED_STEPS = 24
PROFILED_STEPS = 3


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
    from m3agent.engine.native.core.sampling_params import native_params
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
        engine.add_request(f"r{i}", prompt, native_params(max_tokens=100_000, ignore_eos=True))
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
    from m3agent.engine.native.core.sampling_params import native_params
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
    engine.generate([prompt[: min(20000, ctx // 2)]], native_params(max_tokens=1, ignore_eos=True))
    engine.kv_cache_manager.reset_prefix_cache()
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = engine.generate([prompt], native_params(max_tokens=1, ignore_eos=True))[0]
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
