"""Issue 8's benchmark: the whole repository in the prompt, and every turn a prefix-cache hit.

1. session:  a 10-turn scripted session (fixed user prompts, two of them carrying a pasted
             diff) through the real factory, Session, loop and NativeEngine, on a random M3
             checkpoint written by init-tiny (shape options below), with a snapshot of a real
             repository (default: this checkout). Per turn: prompt, cached, recomputed and new
             tokens (new = not in the previous request's prompt + output), TTFT; target: every
             turn after the first recomputes at most its new tokens plus one 128-token page.
2. build:    snapshot build time for about 1M tokens of real source (copies of this checkout's
             text files), with the bundled M3 BPE tokenizer (or --tokenizer-dir), tokenizer load
             excluded; cold (no token-count cache) and warm.
3. large:    a generated repository of 10,000 files: build time cold and warm, counts.

Peak memory (RSS, and CUDA when used) is reported. Results go to --out as one JSON object.

    python bench/context_session.py                       # CPU, tiny M3
    python bench/context_session.py --device cuda --layers 4 --dense-layers 1 --hidden 2048 \\
        --heads 64 --kv-heads 4 --experts 8 --vocab 4096 --budget 120000 --chunk 16384 \\
        --max-tokens 32            # an M3-shaped attention stack on one H200
                                   # (writes bench/results/context_session_cuda.json)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import session_common as sc  # bench/session_common.py: this script's folder

PROMPTS = [
    "Give me an overview of this repository's layout.",
    "Which module renders the M3 prompt?",
    "How does the session log survive a crash?",
    "I changed this, review it:\n--- a/agent/loop.py\n+++ b/agent/loop.py\n@@\n-    x = 1\n"
    "+    x = 2\n",
    "Where are tool calls parsed?",
    "What does the scheduler do with a long prompt?",
    "And this one:\n--- a/engine/api.py\n+++ b/engine/api.py\n@@\n-    y = 1\n+    y = 3\n",
    "How is the KV cache shared between requests?",
    "What would you test next?",
    "Summarise what we discussed.",
]


def session_bench(args, work: Path) -> dict:
    from m3agent.agent import events as ev
    from m3agent.agent.ops import UserTurn
    from m3agent.app.factory import build_session

    model_dir = sc.init_model(work / "model", args)
    t0 = time.perf_counter()
    engine = sc.recording_engine(model_dir, args, max_model_len=args.max_model_len)
    load_s = time.perf_counter() - t0
    settings = sc.session_settings(work, model_dir, args, thinking="disabled")
    t0 = time.perf_counter()
    session = build_session(settings, cwd=args.repo, engine=engine)
    session_build_s = time.perf_counter() - t0

    async def drive() -> list:
        seen = []
        stream = session.events()
        for text in PROMPTS[: args.turns]:
            session.submit(UserTurn(text))
            async for e in stream:
                seen.append(e)
                if isinstance(e, ev.TurnComplete):
                    break
        await session.close()
        await engine.close()
        return seen

    snap, usages = sc.session_events(asyncio.run(drive()), engine)
    turns = []
    for n, ((_ids, new), u) in enumerate(
        zip(sc.new_tokens(engine, model_dir, session_mode=False), usages, strict=True)
    ):
        turns.append({**sc.turn_figures(n, u, new), "generated_tokens": u.generated_tokens})
    later = [t["ttft_s"] for t in turns[1:] if t["ttft_s"] is not None]
    return {
        "model": {**sc.model_record(args), "load_s": round(load_s, 3)},
        "repository": str(args.repo),
        "snapshot": snap,
        "session_build_s": round(session_build_s, 3),
        "turns": turns,
        "ttft_turn1_s": turns[0]["ttft_s"],
        "ttft_turns_2_10_mean_s": sum(later) / len(later) if later else None,
        "ttft_turns_2_10_max_s": max(later) if later else None,
        "all_within_target": all(t["within_target"] for t in turns),
    }


def _copy_source(dest: Path, target_tokens: int, tokenizer) -> int:
    """Copies this checkout's committed text files into dest/copyN/ until about target tokens."""
    files = subprocess.run(
        ["git", "-C", str(sc.ROOT), "ls-files"], capture_output=True, text=True, check=True
    ).stdout.split()
    return sc.copy_checkout(dest, files, target_tokens, tokenizer)


def build_bench(args, work: Path) -> dict:
    from m3agent.agent.context import SnapshotConfig, build_snapshot
    from m3agent.engine.m3.tokenizer import M3Tokenizer

    t0 = time.perf_counter()
    tok = (
        M3Tokenizer.from_model_dir(args.tokenizer_dir)
        if args.tokenizer_dir
        else M3Tokenizer.default()
    )
    tok.encode_text_batch(["warm"])
    tok_load_s = time.perf_counter() - t0
    src = work / "source"
    approx = _copy_source(src, args.build_tokens, tok)
    cache = work / "token-cache"
    out = {
        "tokenizer": str(args.tokenizer_dir or "bundled M3 BPE (vocab 8192)"),
        "tokenizer_load_s": round(tok_load_s, 3),
        "source_tokens_approx": approx,
    }
    for label, cache_dir in (("cold", None), ("cache_fill", cache), ("warm", cache)):
        t0 = time.perf_counter()
        s = build_snapshot(src, tok, SnapshotConfig(4 * args.build_tokens, cache_dir=cache_dir))
        out[f"{label}_s"] = round(time.perf_counter() - t0, 3)
        out["tokens"] = s.tokens
        out["files"] = len(s.entries("included"))
    return out


def large_bench(work: Path) -> dict:
    from m3agent.agent.context import SnapshotConfig, build_snapshot
    from m3agent.engine.m3.tokenizer import M3Tokenizer

    root = work / "big"
    for i in range(10_000):
        d = root / f"pkg{i % 97:02d}" / f"sub{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        callee = f"helper_{(i * 7919) % 10_000}"
        (d / f"mod_{i}.py").write_text(
            f"from pkg.shared import {callee}\n\n\ndef helper_{i}(x):\n    return {callee}(x) + {i}\n"
        )
    subprocess.run(
        "git init -q && git add -A && git -c user.name=b -c user.email=b@b commit -qm i",
        shell=True,
        cwd=root,
        check=True,
    )
    tok = M3Tokenizer.default()
    out: dict = {"files": 10_000}
    for label, cache in (("cold", None), ("cache_fill", work / "c10k"), ("warm", work / "c10k")):
        t0 = time.perf_counter()
        s = build_snapshot(root, tok, SnapshotConfig(100_000, cache_dir=cache))
        out[f"{label}_s"] = round(time.perf_counter() - t0, 3)
    out.update(
        budget=100_000,
        tokens=s.tokens,
        included=len(s.entries("included")),
        listed=len(s.entries("listed")),
        skipped=len(s.entries("skipped")),
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sc.add_model_args(ap)
    ap.add_argument("--repo", type=Path, default=sc.ROOT, help="repository to snapshot")
    ap.add_argument("--budget", type=int, default=8_000, help="snapshot token budget")
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=16, help="generated tokens per turn")
    ap.add_argument("--max-model-len", type=int, default=None)
    ap.add_argument("--build-tokens", type=int, default=1_000_000)
    ap.add_argument("--tokenizer-dir", type=Path, default=None)
    ap.add_argument("--skip", default="", help="comma list of parts to skip: session,build,large")
    ap.add_argument("--out", type=Path, default=None)
    args = sc.parse_args(ap)
    skip = set(filter(None, args.skip.split(",")))
    out_path = args.out or sc.ROOT / "bench" / "results" / f"context_session_{args.device}.json"
    result: dict = sc.host_record()
    work = Path(tempfile.mkdtemp(prefix="m3ctx-bench-"))
    try:
        if "session" not in skip:
            result["session"] = session_bench(args, work)
            result["rss_after_session_mb"] = round(sc.peak_rss_mb(), 1)
        if "build" not in skip:
            result["build_1m"] = build_bench(args, work)
        if "large" not in skip:
            result["large_10k"] = large_bench(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["peak_rss_mb"] = round(sc.peak_rss_mb(), 1)
    if args.device.startswith("cuda"):
        import torch

        result["peak_cuda_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
