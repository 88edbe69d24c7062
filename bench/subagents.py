"""Issue 23's benchmark: subagents on the parent's cached prefix, with the real NativeEngine.

A parent session (real factory, Session, loop) over a repository snapshot of --budget tokens
answers one prompt; then task-tool children (agent/subagents/child.py, the code the task tool
runs) start from its prefix:

1. first child:   its first request's prompt and cached tokens (target: >= 95% cached);
2. sequential:    4 children one after another, wall time;
3. parallel:      4 children at once (asyncio.gather, one engine: batched), wall time.

Each phase also reports where its time went (PhaseClock): engine steps, requests per step,
seconds inside steps, and the event-loop thread's CPU time (prompt rendering, parsing, the
children's sessions). --threads 2,1 repeats the phases per torch thread count.

The model is a random M3 checkpoint written by init-tiny (shape options below): it speaks
nonsense, so each child is given a budget of one engine call and --max-tokens tokens.

    python bench/subagents.py                                   # CPU, small snapshot
    python bench/subagents.py --budget 24000 --layers 2 --threads 2,1 \
        --out bench/results/subagents_cpu_2026-12-02.json      # ~31K-token prompt, 2 cores
    python bench/subagents.py --device cuda --budget 100000 --chunk 16384 \\
        --out bench/results/subagents_cuda.json                 # 100K tokens on one GPU
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from phase_clock import PhaseClock  # noqa: E402
from session_common import add_model_args, init_model, model_record, parse_args  # noqa: E402
from subagents_engine_only import engine_only  # noqa: E402


def engine_for(model_dir: Path, args):
    from m3agent.engine.backends.native import NativeEngine
    from m3agent.engine.native.core.engine_config import EngineConfig

    cfg = EngineConfig(
        max_num_batched_tokens=args.chunk,
        max_model_len=args.max_model_len,
        kv_cache_memory_bytes=args.kv_bytes,
        device=args.device,
    )
    return NativeEngine.from_model_dir(model_dir, device=args.device, dtype=args.dtype, config=cfg)


def child_row(out, wall_s: float | None = None) -> dict:
    share = out.first_cached_tokens / out.first_prompt_tokens if out.first_prompt_tokens else 0.0
    row = {
        "prompt_tokens": out.first_prompt_tokens,
        "cached_prompt_tokens": out.first_cached_tokens,
        "cached_share": round(share, 4),
        "reason": out.reason,
    }
    if wall_s is not None:
        row["wall_s"] = round(wall_s, 3)
    return row


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def run(args, work: Path) -> dict:
    from m3agent.agent import events as ev
    from m3agent.agent.ops import UserTurn
    from m3agent.agent.subagents import AgentDef
    from m3agent.agent.subagents.child import run_child
    from m3agent.app.factory import build_session
    from m3agent.app.settings import Settings

    model_dir = init_model(work / "model", args)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads[0])
    t0 = time.perf_counter()
    engine = engine_for(model_dir, args)
    clock = PhaseClock(engine)
    load_s = time.perf_counter() - t0
    settings = Settings(
        home=work / "home",
        config_path=work / "none.toml",
        user_dir=work / "user",
        engine="native",
        model=str(model_dir),
        approval="never",
        thinking="disabled",
        max_tokens=args.max_tokens,
        context_budget=args.budget,
    )
    session = build_session(settings, cwd=args.repo, engine=engine)
    agent = AgentDef("bench", "benchmark child", "Answer in one word.", tools=(), max_turns=1)

    async def drive() -> dict:
        stream = session.events()
        seen = []
        session.submit(UserTurn("Give me an overview of this repository."))
        async for e in stream:
            seen.append(e)
            if isinstance(e, ev.TurnComplete):
                break
        parent = [e.usage for e in seen if isinstance(e, ev.ModelRequestFinished)]
        snap = next(
            (e.detail for e in seen if isinstance(e, ev.ContextEvent) and e.action == "snapshot"),
            {},
        )

        async def child(i: int):
            t = time.perf_counter()
            out = await run_child(session, agent, f"Question {i}: what is file {i} for?", f"b{i}")
            return out, time.perf_counter() - t

        async def phases(base: int) -> dict:
            """4 children in sequence, then 4 at once; child ids differ per call, so every
            child has its own task message after the shared prefix."""
            clock.start()
            t = time.perf_counter()
            seq = [await child(base + i) for i in range(args.children)]
            seq_s = time.perf_counter() - t
            seq_profile = clock.stop()
            clock.start()
            t = time.perf_counter()
            par = await asyncio.gather(*(child(base + 50 + i) for i in range(args.children)))
            par_s = time.perf_counter() - t
            par_profile = clock.stop()
            return {
                "torch_threads": torch_threads(),
                "sequential": {
                    "children": args.children,
                    "wall_s": round(seq_s, 3),
                    "profile": seq_profile,
                    "each": [child_row(o, s) for o, s in seq],
                },
                "parallel": {
                    "children": args.children,
                    "wall_s": round(par_s, 3),
                    "profile": par_profile,
                    "each": [child_row(o, s) for o, s in par],
                },
                "parallel_speedup": round(seq_s / par_s, 3) if par_s else None,
            }

        first, first_s = await child(0)
        runs = []
        for k, n in enumerate(args.threads or [0]):
            if n:
                import torch

                torch.set_num_threads(n)
            runs.append(await phases(100 * (k + 1)))
        await session.close()
        await engine.close()
        return {
            "snapshot": snap,
            "parent_request": {
                "prompt_tokens": parent[0].prompt_tokens,
                "ttft_s": parent[0].time_to_first_token_s,
            },
            "first_child": child_row(first, first_s),
            **{k: v for k, v in runs[0].items() if k != "torch_threads"},
            "by_threads": runs,
        }

    result = asyncio.run(drive())
    shares = [result["first_child"]["cached_share"]] + [
        r["cached_share"]
        for run in result["by_threads"]
        for part in ("sequential", "parallel")
        for r in run[part]["each"]
    ]
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "device": args.device,
        "model": {**model_record(args), "load_s": round(load_s, 3)},
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "budget_tokens": args.budget,
        "max_tokens": args.max_tokens,
        **result,
        "min_cached_share": min(shares),
        "target_met": min(shares) >= 0.95,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(ap)
    ap.add_argument("--repo", type=Path, default=ROOT)
    ap.add_argument("--budget", type=int, default=8_000, help="snapshot token budget")
    ap.add_argument("--children", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--max-model-len", type=int, default=None)
    ap.add_argument(
        "--threads",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[],
        help="torch CPU threads for the children, e.g. 2,1: the phases run once per value "
        "after one parent request (default: torch's own choice)",
    )
    ap.add_argument(
        "--engine-only", action="store_true", help="time LLMEngine steps only (see engine_only)"
    )
    ap.add_argument(
        "--profile-steps", action="store_true", help="with --engine-only: torch.profiler tables"
    )
    ap.add_argument("--out", type=Path, default=None)
    args = parse_args(ap)
    with tempfile.TemporaryDirectory(prefix="m3agent-bench-sub-") as tmp:
        result = (engine_only if args.engine_only else run)(args, Path(tmp))
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
