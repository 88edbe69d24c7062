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
import shutil
import tempfile
import time
from pathlib import Path

import session_common as sc  # bench/session_common.py: this script's folder

MODES = ("enabled", "disabled", "adaptive")


def _source_paths() -> list[Path]:
    """This checkout's paths but hidden ones and results (a walk: a copied tree has no .git)."""
    out = []
    for p in sorted(sc.ROOT.rglob("*")):
        rel = p.relative_to(sc.ROOT)
        if not (any(part.startswith(".") for part in rel.parts) or "results" in rel.parts):
            out.append(rel)
    return out


def make_repo(dest: Path, target_tokens: int, tokenizer) -> int:
    """Copies of this checkout's text files until about target tokens (a real code base)."""
    return sc.copy_checkout(dest, _source_paths(), target_tokens, tokenizer)


def run(args, work: Path, save) -> dict:
    from m3agent.agent import events as ev
    from m3agent.agent.ops import SetThinking, UserTurn
    from m3agent.app.factory import build_session
    from m3agent.engine.m3.tokenizer import M3Tokenizer

    model_dir = sc.init_model(work / "model", args)
    tok = M3Tokenizer.from_model_dir(model_dir)
    repo = work / "repo"
    make_repo(repo, int(args.budget * 1.2), tok)

    engine = sc.recording_engine(model_dir, args)
    settings = sc.session_settings(work, model_dir, args, thinking="adaptive")
    session = build_session(settings, cwd=repo, engine=engine)
    turn_modes = [MODES[i % 3] for i in range(args.turns)]
    announced: dict = {}

    seen: list = []
    t0 = time.perf_counter()

    def analyze(default_change: bool) -> dict:
        snap, usages = sc.session_events(seen, engine)
        turns = []
        for n, ((ids, new), req, u) in enumerate(
            zip(sc.new_tokens(engine, model_dir), engine.requests, usages, strict=True)
        ):
            assert len(ids) == u.prompt_tokens, (len(ids), u.prompt_tokens)
            changed = default_change and n == len(engine.requests) - 1
            within = n == 0 or changed or u.recomputed_prompt_tokens <= new + sc.PAGE
            turns.append(
                {
                    **sc.turn_figures(n, u, new, within_target=within),
                    "thinking_mode": req.thinking_mode,
                    "session_thinking_mode": req.session_thinking_mode,
                }
            )
        toggles = turns[1 : args.turns]
        out = {
            "model": sc.model_record(args),
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
    sc.add_model_args(
        ap, layers=2, hidden=128, heads=2, kv_heads=1, experts=2, head_dim=64, chunk=4096
    )
    ap.add_argument("--budget", type=int, default=110_000, help="snapshot token budget")
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=8, help="generated tokens per turn")
    ap.add_argument(
        "--default-change",
        action="store_true",
        help="end with a session-default change and record its announced cost",
    )
    ap.add_argument(
        "--out", type=Path, default=sc.ROOT / "bench" / "results" / "thinking_toggle_cpu.json"
    )
    args = sc.parse_args(ap)
    work = Path(tempfile.mkdtemp(prefix="m3toggle-bench-"))
    head = sc.host_record()

    def save(part: dict) -> None:
        result = {
            **head,
            **part,
            "peak_rss_mb": round(sc.peak_rss_mb(), 1),
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
