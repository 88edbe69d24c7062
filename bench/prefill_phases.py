"""Issue 35 point 3 / issue 38: where a long cold prefill's time goes in the native engine, on
the CPU, for the tiny random M3 that `m3agent model init-tiny` writes (its default shape: 4
layers, hidden 256, 4 query / 2 KV heads of 128, 1 dense-attention layer + 3 MSA layers with
top-16 blocks of 128, 4 experts of width 128).

The checkpoint is written by init-tiny's own writer and loaded by `LLM.from_model_dir`, as
`m3agent run --engine native` loads it; each prompt (random token ids) is prefilled cold
through the real LLMEngine (scheduler, paged cache, chunked prefill, runner, sampler) to its
first token. Each engine step is split into phases by timing the engine's own components in
place (the CPU runs synchronously, so wall time is the cost):

  scheduler        Scheduler.schedule + update_from_output
  metadata         model_runner.build_attention_metadata (positions, slots, block tables)
  kv_insert        the op table's insert_kv + insert_index
  index_topk       index_select_blocks (index scoring over the prefix + top-k)
  sparse_attn      sparse_attention (the MSA layers' attention over the selected blocks)
  dense_attn       dense_attention (the dense layer's causal attention over the prefix)
  attn_proj        the rest of the attention modules (projections, QK-norm, RoPE)
  moe / mlp        the MoE blocks / the dense layer's MLP
  logits_sampler   compute_logits + the sampler
  other            the step's remainder (embedding, norms, engine bookkeeping)

and each phase is also reported per chunk against the chunk's context, so a term that grows
with the prefix shows as its first and last chunk's seconds. The arithmetic bound counts the
model's FLOPs over the prompt (projections, router, top-k experts, shared expert; causal
dense attention; index scoring of every visible key; sparse attention over min(pos+1,
top-k x 128) keys) against this host's measured fp32 GEMM rate.

    python bench/prefill_phases.py [--lengths 8192,16384,32768] [--chunk N] [--label after]
        [--device cuda]

--device cuda: the same on a GPU (bf16, the GPU serving chunk, Triton kernels), each phase
timed between two synchronisations (so the queue does not hide a phase; the steps run a
little slower than unmeasured) and the bound at the GPU's measured bf16 GEMM rate: where a
long snapshot's time to first token goes beyond the model's arithmetic (issue 35).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from results_dir import add_out_arg, dated_json  # noqa: E402

PHASES = (
    "scheduler",
    "metadata",
    "kv_insert",
    "index_topk",
    "sparse_attn",
    "dense_attn",
    "attn_proj",
    "moe",
    "mlp",
    "logits_sampler",
    "other",
)


class StepClock:
    """Wall and process-CPU seconds per phase per engine step. A wrapped call adds its time to
    its phase and takes it off the enclosing wrapped call's (so one step's phases add up to
    the step). CPU seconds hold up better than wall seconds on a shared, loaded machine."""

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self.sync = sync or (lambda: None)  # a GPU's queue drained at each edge
        self.steps: list[dict] = []
        self._cur: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self._stack: list[list[float]] = []  # child wall, cpu accumulated under each open call

    def wrap(self, phase: str, fn: Callable) -> Callable:
        def timed(*a, **kw):
            self._stack.append([0.0, 0.0])
            self.sync()
            t, c = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                self.sync()
                dt_, dc = time.perf_counter() - t, time.process_time() - c
                child = self._stack.pop()
                cur = self._cur[phase]
                cur[0] += dt_ - child[0]
                cur[1] += dc - child[1]
                if self._stack:
                    self._stack[-1][0] += dt_
                    self._stack[-1][1] += dc

        return timed

    def end_step(self, seconds: float, cpu: float, context: int, tokens: int) -> None:
        wall = {p: self._cur[p][0] for p in PHASES if p != "other"}
        cpus = {p: self._cur[p][1] for p in PHASES if p != "other"}
        wall["other"] = max(0.0, seconds - sum(wall.values()))
        cpus["other"] = max(0.0, cpu - sum(cpus.values()))
        self.steps.append(
            {"context": context, "tokens": tokens, "step_s": seconds, "step_cpu_s": cpu}
            | wall
            | {p + "_cpu": v for p, v in cpus.items()}
        )
        self._cur.clear()


def instrument(engine, clock: StepClock) -> None:
    """Wraps the engine's components in place (this engine and model only)."""
    from m3agent.engine.native.runner import model_runner

    sched = engine.scheduler
    sched.schedule = clock.wrap("scheduler", sched.schedule)
    sched.update_from_output = clock.wrap("scheduler", sched.update_from_output)
    if not hasattr(model_runner, "_unwrapped_build_md"):
        model_runner._unwrapped_build_md = model_runner.build_attention_metadata
    model_runner.build_attention_metadata = clock.wrap("metadata", model_runner._unwrapped_build_md)
    model = engine.model
    model.compute_logits = clock.wrap("logits_sampler", model.compute_logits)
    runner = engine.runner
    runner.sampler = clock.wrap("logits_sampler", runner.sampler)
    for layer in model.model.layers:
        attn = layer.self_attn
        ops = attn.ops
        attn.ops = dataclasses.replace(
            ops,
            insert_kv=clock.wrap("kv_insert", ops.insert_kv),
            insert_index=clock.wrap("kv_insert", ops.insert_index),
            index_select_blocks=clock.wrap("index_topk", ops.index_select_blocks),
            sparse_attention=clock.wrap("sparse_attn", ops.sparse_attention),
            dense_attention=clock.wrap("dense_attn", ops.dense_attention),
        )
        attn.forward = clock.wrap("attn_proj", attn.forward)
        if layer.is_moe:
            layer.block_sparse_moe.forward = clock.wrap("moe", layer.block_sparse_moe.forward)
        else:
            layer.mlp.forward = clock.wrap("mlp", layer.mlp.forward)


def gemm_gflops(n: int = 2048, trials: int = 5, device: str = "cpu") -> float:
    """This host's fp32 GEMM rate, or the GPU's bf16 one (n x n x n, the best of `trials`: on
    a shared machine the best is the closest to what it can do), the bound's compute ceiling."""
    cuda = device == "cuda"
    n = 8192 if cuda else n
    dtype = torch.bfloat16 if cuda else torch.float32
    a, b = (torch.randn(n, n, dtype=dtype, device=device) for _ in range(2))
    a @ b
    best = float("inf")
    for _ in range(trials):
        _sync(device)
        t = time.perf_counter()
        a @ b
        _sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def prefill_flops(c, n: int) -> dict[str, float]:
    """FLOPs of a cold prefill of n tokens (2 per multiply-add), by part. The projections are
    2 x the weights a token touches; attention terms sum over positions p = 0..n-1."""
    s = c.sparse_attention_config
    h, hq, hkv, d = c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim
    di, hidx = s.sparse_index_dim, s.sparse_num_index_heads
    keys_all = n * (n + 1) / 2  # sum over p of (p + 1)
    cap = s.sparse_topk_blocks * 128
    keys_sparse = keys_all if n <= cap else cap * (cap + 1) / 2 + (n - cap) * cap
    out = defaultdict(float)
    for i in range(c.num_hidden_layers):
        sparse = c.is_sparse_layer(i)
        w = h * (2 * hq * d + 2 * hkv * d)  # q, o, k, v
        if sparse:
            w += h * (hidx * di + di)  # index q, index k
        if c.is_moe_layer(i):
            inter = c.intermediate_size
            w += h * c.num_local_experts  # router
            w += (c.num_experts_per_tok + c.n_shared_experts) * 3 * h * inter
        else:
            w += 3 * h * c.dense_intermediate_size
        out["projections"] += 2 * w * n
        if sparse:
            out["index_scoring"] += 2 * hidx * di * keys_all
            out["sparse_attention"] += 4 * hq * d * keys_sparse
        else:
            out["dense_attention"] += 4 * hq * d * keys_all
    out["lm_head"] = 2 * h * c.vocab_size
    return dict(out)


COMPILED: list[str] = []  # kernels Triton compiled in this process, in order (--log-compiles)


def log_compiles() -> None:
    """Record each kernel Triton compiles (a cache miss, disk cache included): its name and
    the constants it was specialised on, so a spike in a step's time names its cause."""
    import triton

    def hook(*, repr: str, compile: dict, **_: object) -> bool:
        # the kernel's name, then its specialisation key: the argument types with Triton's
        # divisibility hints and the constexpr values (what differs between two compiles)
        COMPILED.append(repr.split("[", 1)[0] + " " + str(compile.get("key", ""))[:600])
        return False  # compile it (True would skip the compile)

    triton.knobs.runtime.jit_cache_hook = hook


def load_avg() -> float:
    return os.getloadavg()[0]


def run_length(
    model_dir: Path, n: int, chunk: int, seed: int, torch_ops: str, device: str = "cpu"
) -> dict:
    from m3agent.engine.native.core.engine_config import EngineConfig
    from m3agent.engine.native.core.sampling_params import native_params
    from m3agent.engine.native.llm import LLM

    per_token = 4 * 2 * 2 * 128 * 4 + 3 * 128 * 4  # fp32 K|V of 2 heads x 4 layers, index keys
    config = EngineConfig(
        max_num_batched_tokens=chunk,
        max_num_seqs=1,
        max_model_len=n + 64,
        kv_cache_memory_bytes=int(per_token * (n + 1024) * 1.1) + (64 << 20),
        enable_prefix_caching=False,
    )
    # the op table reads M3AGENT_TORCH_OPS when the model is built: "all" is the torch
    # references (the CPU path before layers/cpu_attention.py), "" the CPU path
    saved = os.environ.get("M3AGENT_TORCH_OPS")
    os.environ["M3AGENT_TORCH_OPS"] = torch_ops
    try:
        dtype = "bfloat16" if device == "cuda" else "float32"
        engine = LLM.from_model_dir(model_dir, device=device, dtype=dtype, config=config)
    finally:
        if saved is None:
            del os.environ["M3AGENT_TORCH_OPS"]
        else:
            os.environ["M3AGENT_TORCH_OPS"] = saved
    clock = StepClock(lambda: _sync(device))
    instrument(engine, clock)
    step = engine.step
    vocab = engine.model.config.vocab_size
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, 256, (n,), generator=gen).tolist()  # byte tokens
    assert max(prompt) < vocab
    if device == "cuda":  # what the prefill allocates, and what the caching allocator keeps
        import gc

        gc.collect()  # the previous length's engine
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    load0 = load_avg()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    engine.add_request("prefill", prompt, native_params(max_tokens=1, ignore_eos=True))
    compiles: list[dict[str, object]] = []
    while engine.has_unfinished_requests():
        req = engine.scheduler.requests.get("prefill")
        ctx = req.num_computed_tokens if req is not None else n
        _sync(device)
        ts, cs = time.perf_counter(), time.process_time()
        before = len(COMPILED)
        step()
        compiles += [
            {"step": len(clock.steps), "context": ctx, "kernel": k} for k in COMPILED[before:]
        ]
        _sync(device)
        clock.end_step(time.perf_counter() - ts, time.process_time() - cs, ctx, min(chunk, n - ctx))
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    totals = {p: round(sum(s[p] for s in clock.steps), 3) for p in PHASES}
    cpu_totals = {p: round(sum(s[p + "_cpu"] for s in clock.steps), 3) for p in PHASES}
    first, last = clock.steps[0], clock.steps[-1]
    c = engine.model.config
    return {
        "ops": "torch references" if torch_ops == "all" else f"{device} path",
        "prompt_tokens": n,
        "chunk": chunk,
        "steps": len(clock.steps),
        "prefill_s": round(wall, 3),
        "tok_per_s": round(n / wall, 1),
        "process_cpu_s": round(cpu, 3),
        "load_avg_1m": [round(load0, 2), round(load_avg(), 2)],
        "phase_s": totals,
        "phase_share": {p: round(v / wall, 3) for p, v in totals.items()},
        "phase_cpu_s": cpu_totals,
        "tok_per_cpu_s": round(n / cpu, 1),
        # the same phases in the first chunk (context 0) and the last (context n - chunk):
        # a phase whose last-chunk cost is far above its first grows with the prefix
        "first_chunk": {k: round(v, 4) for k, v in first.items()},
        # every chunk's step: a step far above its neighbours is a one-time cost (on the GPU,
        # a kernel compiled for a new shape bucket), not the prefix's
        "step_s": [round(s["step_s"], 4) for s in clock.steps],
        "compiles": compiles,  # with --log-compiles: each Triton compile, at its step
        "last_chunk": {k: round(v, 4) for k, v in last.items()},
        "flops": {k: round(v / 1e9, 2) for k, v in prefill_flops(c, n).items()},
        **_gpu_memory(device),
    }


def _gpu_memory(device: str) -> dict:
    """Peak bytes in tensors against the peak the allocator reserved: a gap that grows with
    the prompt is memory held for buffers that are never reused."""
    if device != "cuda":
        return {}
    gib = 2**30
    return {
        "gpu_peak_allocated_gib": round(torch.cuda.max_memory_allocated() / gib, 2),
        "gpu_peak_reserved_gib": round(torch.cuda.max_memory_reserved() / gib, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="8192,16384,32768")
    ap.add_argument("--chunk", type=int, default=None, help="default: the CPU serving chunk")
    ap.add_argument("--label", default="run", help="a name for this run")
    ap.add_argument(
        "--before",
        default="8192,16384",
        help="lengths also run on the torch references (the CPU path before), same run",
    )
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument(
        "--log-compiles", action="store_true", help="record each Triton compile and its step"
    )
    ap.add_argument(
        "--repeat", type=int, default=1,
        help="run each length this many times in this process (a fresh engine each): the "
        "later runs find the kernels compiled",
    )  # fmt: skip
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--note", default="", help="a line on the run's conditions, kept in the JSON")
    add_out_arg(ap)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.log_compiles:
        log_compiles()
    from m3agent.engine.native.core.engine_config import serving_config
    from m3agent.engine.native.loaders.tiny import init_tiny

    chunk = args.chunk or serving_config(args.device).max_num_batched_tokens
    gflops = gemm_gflops(device=args.device)
    date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    record = {
        "bench": "prefill_phases",
        "label": args.label,
        "date": date,
        "host": {
            "name": "cpu-2core" if os.cpu_count() == 2 else f"cpu-{os.cpu_count()}core",
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "gemm_gflops": round(gflops, 1),
            "gemm_dtype": "bf16" if args.device == "cuda" else "fp32",
            "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
        },
        "model": "m3agent model init-tiny (defaults), "
        + ("bfloat16 on the GPU" if args.device == "cuda" else "float32 on the CPU"),
        "note": args.note,
        "rows": [],
    }
    out = dated_json(args.out, f"prefill_phases_{args.label}", date)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = init_tiny(Path(tmp) / "tiny")
        before = {int(x) for x in args.before.split(",") if x}
        for n in (int(x) for x in args.lengths.split(",")):
            runs = [("all", 0)] if n in before else []
            runs += [("", k) for k in range(args.repeat)]
            for torch_ops, k in runs:
                row = run_length(
                    model_dir, n, chunk, seed=n, torch_ops=torch_ops, device=args.device
                )
                row["run"] = k + 1  # 2 and on: the same length again in this process
                total = sum(row["flops"].values()) * 1e9
                row["bound_s"] = round(total / (gflops * 1e9), 3)
                row["bound_share"] = round(row["bound_s"] / row["prefill_s"], 3)
                record["rows"].append(row)
                print(json.dumps(row), flush=True)
                out.write_text(json.dumps(record, indent=1))
    print(f"wrote {out}", flush=True)


if __name__ == "__main__":
    main()
