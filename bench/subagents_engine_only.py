"""subagents.py --engine-only: the subagent phases one level down, LLMEngine.step() timed
without sessions. Imported by name: the scripts put this folder on their path."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path


def engine_only(args, work: Path) -> dict:
    """The same question one level down, without sessions: LLMEngine.step() timed directly.
    A --budget-token random prefix is computed once; then 4 requests (prefix + 200 own tokens,
    --max-tokens each) run one after another and then together, per torch thread count, twice.
    Says what a batched step costs against single steps (prefill and decode separately)."""
    import random

    import torch
    from m3agent.engine.native.core.engine_config import EngineConfig
    from m3agent.engine.native.core.llm_engine import LLMEngine
    from m3agent.engine.native.core.sampling_params import native_params
    from m3agent.engine.native.loaders.checkpoint import load_model
    from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

    model_dir = work / "model"
    init_tiny(model_dir, TinySpec(layers=args.layers, hidden=args.hidden, seed=0))
    model = load_model(model_dir, device=args.device, dtype=getattr(torch, args.dtype))
    llm = LLMEngine(
        model, None, EngineConfig(max_num_batched_tokens=args.chunk, device=args.device)
    )
    rng = random.Random(0)
    prefix = [rng.randrange(10, args.vocab - 10) for _ in range(args.budget)]
    counter = iter(range(1_000_000))

    def go(n: int) -> dict:
        for _ in range(n):
            own = [rng.randrange(10, args.vocab - 10) for _ in range(200)]
            params = native_params(max_tokens=args.max_tokens, ignore_eos=True)
            llm.add_request(f"r{next(counter)}", prefix + own, params)
        steps = []
        while llm.has_unfinished_requests():
            t = time.perf_counter()
            llm.step()
            steps.append(time.perf_counter() - t)
        decode = sorted(steps[1:])
        return {
            "total_s": round(sum(steps), 3),
            "steps": len(steps),
            "prefill_step_s": round(steps[0], 3),
            "median_decode_step_s": round(decode[len(decode) // 2], 4) if decode else None,
        }

    def profiled_decode(n: int) -> dict:
        """torch.profiler over one decode step of n requests: the ops that take its time."""
        from torch.profiler import ProfilerActivity, profile

        for _ in range(n):
            own = [rng.randrange(10, args.vocab - 10) for _ in range(200)]
            params = native_params(max_tokens=6, ignore_eos=True)
            llm.add_request(f"r{next(counter)}", prefix + own, params)
        llm.step()  # the prefills
        llm.step()  # a first decode
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            t = time.perf_counter()
            llm.step()
            wall = time.perf_counter() - t
        while llm.has_unfinished_requests():
            llm.step()
        ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
        total = sum(e.self_cpu_time_total for e in ops) or 1.0
        return {
            "requests": n,
            "wall_s": round(wall, 4),
            "top_ops_self_cpu_share": {
                e.key: round(e.self_cpu_time_total / total, 3) for e in ops[:6]
            },
        }

    t = time.perf_counter()
    llm.add_request("parent", prefix, native_params(max_tokens=1, ignore_eos=True))
    while llm.has_unfinished_requests():
        llm.step()
    rows = []
    for rep in range(2):
        for n in args.threads or [torch.get_num_threads()]:
            torch.set_num_threads(n)
            singles = [go(1) for _ in range(args.children)]
            rows.append(
                {
                    "rep": rep,
                    "torch_threads": n,
                    "sequential_total_s": round(sum(s["total_s"] for s in singles), 3),
                    "single_prefill_step_s": singles[0]["prefill_step_s"],
                    "single_decode_step_s": singles[0]["median_decode_step_s"],
                    "parallel": go(args.children),
                    "load_average": os.getloadavg(),
                }
            )
    profiles = []
    if args.profile_steps:
        torch.set_num_threads((args.threads or [torch.get_num_threads()])[0])
        profiles = [profiled_decode(n) for n in (1, args.children, 1, args.children)]
    return {
        "mode": "engine-only",
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "device": args.device,
        "model": {"layers": args.layers, "hidden": args.hidden, "dtype": args.dtype},
        "prefix_tokens": args.budget,
        "parent_prefill_s": round(time.perf_counter() - t, 3),
        "max_tokens": args.max_tokens,
        "children": args.children,
        "rows": rows,
        "decode_step_profiles": profiles,
    }
