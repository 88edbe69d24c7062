"""Issue 12's toggle benchmark: a 10-turn session whose thinking mode changes every turn, over
a >= 100K-token repository snapshot, on the native engine (a tiny random M3 from init-tiny).

The session starts in the default mode ("adaptive", written once in the system block); each
turn asks for enabled / disabled / adaptive in turn, applied through the generation prefix
only. Per turn: prompt, cached, recomputed and new tokens (new = not in the previous request's
prompt + computed output); target: every turn after the first recomputes at most its new
tokens plus one 128-token page. With --default-change, a last turn first changes the session
default (SetThinking(session_default=True)): the event's announced recompute_tokens is
recorded beside what the next request really recomputed.

    python bench/thinking_toggle.py                     # CPU, ~110K-token snapshot
    python bench/thinking_toggle.py --budget 8000 --out /tmp/t.json   # quick
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from recording import recording_engine_class  # bench/recording.py: this script's folder

PAGE = 128
ROOT = Path(__file__).resolve().parent.parent
MODES = ("enabled", "disabled", "adaptive")


SUFFIXES = (".py", ".md", ".toml", ".tcss", ".txt", ".sh", ".cfg", ".ini")


def _source_files() -> list[Path]:
    """This checkout's text files (a walk: a copied tree has no .git)."""
    out = []
    for p in sorted(ROOT.rglob("*")):
        rel = p.relative_to(ROOT)
        if any(part.startswith(".") for part in rel.parts) or "results" in rel.parts:
            continue
        if p.suffix in SUFFIXES and p.is_file():
            out.append(p)
    return out


def make_repo(dest: Path, target_tokens: int, tokenizer) -> int:
    """Copies of this checkout's text files until about target tokens (a real code base)."""
    files = [
        (p.relative_to(ROOT), p.read_text(encoding="utf-8", errors="replace"))
        for p in _source_files()
    ]
    per_copy = sum(len(ids) for ids in tokenizer.encode_text_batch([t for _, t in files]))
    copies = max(1, -(-target_tokens // max(per_copy, 1)))
    for c in range(copies):
        for rel, text in files:
            out = dest / f"copy{c}" / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
    return per_copy * copies


def run(args, work: Path, save) -> dict:
    from m3agent.agent import events as ev
    from m3agent.agent.ops import SetThinking, UserTurn
    from m3agent.app.factory import build_session
    from m3agent.app.settings import Settings
    from m3agent.engine.backends.scripted import common_prefix_len
    from m3agent.engine.m3.chat_template import ChatTemplate, render_prompt_parts
    from m3agent.engine.m3.tokenizer import M3Tokenizer
    from m3agent.engine.native.core.engine_config import EngineConfig
    from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

    model_dir = work / "model"
    init_tiny(
        model_dir,
        TinySpec(
            layers=args.layers,
            hidden=args.hidden,
            heads=args.heads,
            kv_heads=args.kv_heads,
            experts=args.experts,
            vocab=args.vocab,
            dense_layers=args.dense_layers,
            head_dim=args.head_dim,
            seed=0,
        ),
    )
    tok = M3Tokenizer.from_model_dir(model_dir)
    repo = work / "repo"
    make_repo(repo, int(args.budget * 1.2), tok)

    Recording = recording_engine_class()

    engine = Recording.from_model_dir(
        model_dir,
        device=args.device,
        dtype=args.dtype,
        config=EngineConfig(max_num_batched_tokens=args.chunk, kv_cache_memory_bytes=args.kv_bytes),
    )
    settings = Settings(
        home=work / "home",
        config_path=work / "none.toml",
        engine="native",
        model=str(model_dir),
        approval="never",
        thinking="adaptive",
        max_tokens=args.max_tokens,
        context_budget=args.budget,
    )
    session = build_session(settings, cwd=repo, engine=engine, checkpoint=lambda _l: None)
    turn_modes = [MODES[i % 3] for i in range(args.turns)]
    announced: dict = {}

    tmpl = ChatTemplate.from_model_dir(model_dir)
    seen: list = []
    t0 = time.perf_counter()

    def analyze(default_change: bool) -> dict:
        errors = [e.message for e in seen if isinstance(e, ev.Error)]
        usages = [e.usage for e in seen if isinstance(e, ev.ModelRequestFinished)]
        if errors or len(usages) != len(engine.requests):
            raise SystemExit(f"the session failed: {errors}")
        snap = next(
            e.detail for e in seen if isinstance(e, ev.ContextEvent) and e.action == "snapshot"
        )
        previous: list[int] = []
        turns = []
        for n, (req, u) in enumerate(zip(engine.requests, usages, strict=True)):
            ids = tok.encode_parts(
                render_prompt_parts(
                    list(req.messages),
                    list(req.tools),
                    req.thinking_mode,
                    template=tmpl,
                    session_thinking_mode=req.session_thinking_mode,
                )
            )
            assert len(ids) == u.prompt_tokens, (len(ids), u.prompt_tokens)
            new = len(ids) - common_prefix_len(previous, ids)
            previous = ids + engine.generated[req.request_id][:-1]
            changed = default_change and n == len(engine.requests) - 1
            turns.append(
                {
                    "turn": n + 1,
                    "thinking_mode": req.thinking_mode,
                    "session_thinking_mode": req.session_thinking_mode,
                    "prompt_tokens": u.prompt_tokens,
                    "cached_tokens": u.cached_prompt_tokens,
                    "recomputed_tokens": u.recomputed_prompt_tokens,
                    "new_tokens": new,
                    "extra_recomputed": u.recomputed_prompt_tokens - new,
                    "within_target": n == 0 or changed or u.recomputed_prompt_tokens <= new + PAGE,
                    "ttft_s": u.time_to_first_token_s,
                    "cache_miss_reason": u.cache_miss_reason,
                }
            )
        toggles = turns[1 : args.turns]
        out = {
            "model": {
                "layers": args.layers,
                "hidden": args.hidden,
                "heads": args.heads,
                "kv_heads": args.kv_heads,
                "experts": args.experts,
                "vocab": args.vocab,
                "dense_layers": args.dense_layers,
                "head_dim": args.head_dim,
                "dtype": args.dtype,
                "device": args.device,
            },
            "snapshot": snap,
            "turns": turns,
            "wall_s": round(time.perf_counter() - t0, 1),
            "toggle_turns_all_within_target": all(t["within_target"] for t in toggles),
            "toggle_turns_max_extra_recomputed": max(t["extra_recomputed"] for t in toggles),
            "toggle_turns_max_recomputed": max(t["recomputed_tokens"] for t in toggles),
        }
        if default_change:
            out["default_change"] = {
                "announced_recompute_tokens": announced.get("recompute_tokens"),
                "recomputed_tokens": turns[-1]["recomputed_tokens"],
                "prompt_tokens": turns[-1]["prompt_tokens"],
                "cached_tokens": turns[-1]["cached_tokens"],
            }
        return out

    async def turn(stream, op) -> None:
        session.submit(op)
        async for e in stream:
            seen.append(e)
            if isinstance(e, ev.ContextEvent) and e.action == "thinking_default":
                announced.update(e.detail)
            if isinstance(e, ev.TurnComplete):
                return

    async def drive() -> dict:
        stream = session.events()
        for i, m in enumerate(turn_modes):
            await turn(
                stream, UserTurn(f"Turn {i + 1}: where is the prompt rendered?", thinking_mode=m)
            )
        result = analyze(False)
        save(result)  # the toggle figures are kept even if the last, long turn is cut short
        if args.default_change:
            session.submit(SetThinking("disabled", session_default=True))
            await turn(stream, UserTurn("After the default change.", thinking_mode="disabled"))
            result = analyze(True)
        await session.close()
        await engine.close()
        return result

    return asyncio.run(drive())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, help="default: float32 on cpu, bfloat16 on cuda")
    ap.add_argument("--budget", type=int, default=110_000, help="snapshot token budget")
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=8, help="generated tokens per turn")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--experts", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--dense-layers", type=int, default=1)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=4096, help="max_num_batched_tokens")
    ap.add_argument("--kv-bytes", type=int, default=None, help="KV cache budget in bytes")
    ap.add_argument(
        "--default-change",
        action="store_true",
        help="end with a session-default change and record its announced cost",
    )
    ap.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "thinking_toggle_cpu.json"
    )
    args = ap.parse_args()
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    work = Path(tempfile.mkdtemp(prefix="m3toggle-bench-"))
    head = {
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": len(os.sched_getaffinity(0)),
    }

    def save(part: dict) -> None:
        result = {
            **head,
            **part,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2), flush=True)

    try:
        save(run(args, work, save))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
