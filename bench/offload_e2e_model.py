"""bench/offload_e2e.py's model and machine helpers: the reduced-depth full-width M3 with
random weights on the "GPU", its routed experts built in host memory, the engine around it,
and the machine's bandwidth figures."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import torch


def say(msg: str) -> None:
    print(f"[offload_e2e {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def proc_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def text_config(s: dict, moe_layers: int):
    from m3agent.engine.native.loaders.tiny import TinySpec, tiny_text_config

    spec = TinySpec(
        layers=s["dense_layers"] + moe_layers, hidden=s["hidden"], heads=s["heads"],
        kv_heads=s["kv_heads"], experts=s["experts"], vocab=s["vocab"],
        dense_layers=s["dense_layers"], topk_blocks=s["topk_blocks"],
        experts_per_tok=s["top_k"], intermediate=s["inter"],
        dense_intermediate=s["dense_intermediate"],
    )  # fmt: skip
    return tiny_text_config(spec, eos_id=0, bos_id=1)


def gpu_model(c, device: str):
    """M3 with random bf16 (fp32 on the CPU) weights everywhere but the routed experts."""
    from m3agent.engine.native.models.m3 import M3ForCausalLM

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = M3ForCausalLM(c, dtype=dtype, device=device, experts_device="meta")
    g = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.is_meta:
                continue
            if name.endswith("norm.weight") or name.endswith("e_score_correction_bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02, generator=g)
    return model.eval()


def seed_layer(c, form, seeds: int):
    from m3agent.engine.offload.cpu_experts import HostExpertLayer

    g = torch.Generator().manual_seed(1)
    h, i = c.hidden_size, c.intermediate_size
    w = lambda *shape: torch.randn(*shape, generator=g) * 0.02  # noqa: E731
    return HostExpertLayer.from_weights(
        [w(i, h) for _ in range(seeds)], [w(i, h) for _ in range(seeds)],
        [w(h, i) for _ in range(seeds)], form,
    )  # fmt: skip


def host_layers(c, seed, layer_ids, pin: bool) -> dict:
    """Each layer: every expert slot its own memory, filled from the seed experts."""
    from m3agent.engine.offload.device_experts import tensor_fields

    src = tensor_fields(seed)
    n_seed = seed.num_experts
    out = {}
    for li in layer_ids:
        t = {
            k: torch.empty((c.num_local_experts, *v.shape[1:]), dtype=v.dtype, pin_memory=pin)
            for k, v in src.items()
        }
        for e in range(c.num_local_experts):
            for k, v in t.items():
                v[e].copy_(src[k][(e + li) % n_seed])
        out[li] = dataclasses.replace(seed, **t)
        say(f"  host experts of layer {li} built ({len(out)}/{len(layer_ids)})")
    return out


def machine(cuda: bool, host_bw: float, pcie_bw: float):
    from m3agent.engine.offload.hardware import probe

    if cuda:
        return probe(host_bw_gbs=host_bw / 1e9, pcie_gbs=pcie_bw / 1e9)
    # the smoke run plans for a stand-in GPU
    return probe(gpu_mem_gib=80, gpu_bw_gbs=3000, host_bw_gbs=host_bw / 1e9, pcie_gbs=pcie_bw / 1e9)


def pcie_bw(cuda: bool, nbytes: int) -> float | None:
    if not cuda:
        return None
    src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return nbytes / best


def gpu_used(cuda: bool) -> int:
    if not cuda:
        return 0
    free, total = torch.cuda.mem_get_info()
    return total - free


def engine_for(model, device: str, batch: int, max_len: int, chunk: int):
    from m3agent.engine.native.core.engine_config import EngineConfig
    from m3agent.engine.native.core.llm_engine import LLMEngine
    from m3agent.engine.native.runner.kv_cache_allocator import bytes_per_block

    kv = "fp8" if device == "cuda" else "auto"
    dtype = torch.float8_e4m3fn if kv == "fp8" else model.info.dtype
    blocks = batch * -(-max_len // 128) + 2
    cfg = EngineConfig(
        device=device, max_num_batched_tokens=chunk, max_num_seqs=batch, max_model_len=max_len,
        kv_cache_memory_bytes=blocks * bytes_per_block(model.cache_specs(), dtype),
        kv_cache_dtype=kv,
    )  # fmt: skip
    return LLMEngine(model, None, cfg)


def snapshot(rt) -> dict:
    st = rt.stats()
    hot = st.hot
    return dict(
        cpu_s=st.cpu_s, moe_s=st.moe_s, cpu_bytes=st.cpu_bytes,
        hits=hot.hits if hot else 0, lookups=hot.lookups if hot else 0,
    )  # fmt: skip
