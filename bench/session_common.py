"""What the session benchmarks (context_session.py, thinking_toggle.py, subagents.py) share: a
tiny random M3 from init-tiny shaped by the same flags, the native engine with a record of what
it was asked and what it generated, the settings of a headless session over it, the per-turn
prefix-cache figures of the requests it sent, copies of this checkout as a large repository,
and the host record. Imported by name: the scripts run from this folder's path."""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
from pathlib import Path

PAGE = 128
ROOT = Path(__file__).resolve().parent.parent
SOURCE_SUFFIXES = (".py", ".md", ".toml", ".tcss", ".txt", ".sh", ".cfg", ".ini")


def recording_engine_class():
    """A NativeEngine subclass that records `requests` (each ChatRequest, in order) and
    `generated` (request id -> output token ids); imported late, as the benchmarks import
    m3agent."""
    from m3agent.engine.backends.native import NativeEngine

    class Recording(NativeEngine):
        def __init__(self, *a, **kw):
            self.requests, self.generated = [], {}
            super().__init__(*a, **kw)

        def _deliver(self, out):
            if out.finished:
                self.generated[out.request_id] = list(out.token_ids)
            super()._deliver(out)

        async def stream(self, request):
            self.requests.append(request)
            async for d in super().stream(request):
                yield d

    return Recording


def recording_engine(model_dir: Path, args, **config):
    """The recording engine over model_dir: --device, --dtype, --chunk and --kv-bytes, plus
    any other EngineConfig fields given."""
    from m3agent.engine.native.core.engine_config import EngineConfig

    cfg = EngineConfig(
        max_num_batched_tokens=args.chunk, kv_cache_memory_bytes=args.kv_bytes, **config
    )
    return recording_engine_class().from_model_dir(
        model_dir, device=args.device, dtype=args.dtype, config=cfg
    )


def turn_figures(n: int, usage, new: int, *, within_target: bool | None = None) -> dict:
    """Request n's (from 0) prefix-cache figures; within_target by default: the first request,
    or at most its new tokens plus one page recomputed."""
    if within_target is None:
        within_target = n == 0 or usage.recomputed_prompt_tokens <= new + PAGE
    return {
        "turn": n + 1,
        "prompt_tokens": usage.prompt_tokens,
        "cached_tokens": usage.cached_prompt_tokens,
        "recomputed_tokens": usage.recomputed_prompt_tokens,
        "new_tokens": new,
        "extra_recomputed": usage.recomputed_prompt_tokens - new,
        "within_target": within_target,
        "ttft_s": usage.time_to_first_token_s,
        "cache_miss_reason": usage.cache_miss_reason,
    }


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


MODEL_FLAGS = ("layers", "hidden", "heads", "kv_heads", "experts", "vocab", "dense_layers")
# The tiny model's default shape and --chunk (context_session.py's and subagents.py's).
MODEL_DEFAULTS = {
    "layers": 4,
    "hidden": 256,
    "heads": 4,
    "kv_heads": 2,
    "experts": 4,
    "vocab": 512,
    "dense_layers": 1,
    "head_dim": 128,
    "chunk": 2048,
}


def add_model_args(ap: argparse.ArgumentParser, **defaults: int) -> None:
    """--device, --dtype and the tiny model's shape (--layers ... --head-dim), MODEL_DEFAULTS
    but for the defaults given; --chunk (max_num_batched_tokens) and --kv-bytes of the engine."""
    defaults = {**MODEL_DEFAULTS, **defaults}
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, help="default: float32 on cpu, bfloat16 on cuda")
    for name in (*MODEL_FLAGS, "head_dim"):
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=defaults[name])
    ap.add_argument("--chunk", type=int, default=defaults["chunk"], help="max_num_batched_tokens")
    ap.add_argument("--kv-bytes", type=int, default=None, help="KV cache budget in bytes")


def parse_args(ap: argparse.ArgumentParser) -> argparse.Namespace:
    args = ap.parse_args()
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    return args


def init_model(model_dir: Path, args) -> Path:
    """The tiny random M3 of the shape flags (seed 0) at model_dir."""
    from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

    shape = {name: getattr(args, name) for name in (*MODEL_FLAGS, "head_dim")}
    return init_tiny(model_dir, TinySpec(**shape, seed=0))


def model_record(args) -> dict:
    """The shape flags, dtype and device, as the results JSON names them."""
    return {
        **{name: getattr(args, name) for name in (*MODEL_FLAGS, "head_dim")},
        "dtype": args.dtype,
        "device": args.device,
    }


def session_settings(work: Path, model_dir: Path, args, thinking: str):
    """Settings of a headless native session over model_dir: no approvals, the benchmark's
    --max-tokens and --budget (the snapshot's), a data home under work."""
    from m3agent.app.settings import Settings

    return Settings(
        home=work / "home",
        config_path=work / "none.toml",
        engine="native",
        model=str(model_dir),
        approval="never",
        thinking=thinking,
        max_tokens=args.max_tokens,
        context_budget=args.budget,
    )


def session_events(seen: list, engine):
    """(snapshot detail, one Usage a request) of a finished session; exits on an error."""
    from m3agent.agent import events as ev

    errors = [e.message for e in seen if isinstance(e, ev.Error)]
    usages = [e.usage for e in seen if isinstance(e, ev.ModelRequestFinished)]
    if errors or len(usages) != len(engine.requests):
        raise SystemExit(f"the session failed: {errors}")
    snap = next(e.detail for e in seen if isinstance(e, ev.ContextEvent) and e.action == "snapshot")
    return snap, usages


def new_tokens(engine, model_dir: Path, *, session_mode: bool = True) -> list[tuple[list, int]]:
    """For each request the engine was sent: its prompt ids (rendered again) and how many of
    them are new (not in the previous request's prompt + its computed output). session_mode
    False renders the system block with the template's default session mode instead of the
    request's (context_session.py always has: its turn 1 is then not its prompt to the token)."""
    from m3agent.engine.backends.scripted import common_prefix_len
    from m3agent.engine.m3.chat_template import ChatTemplate, render_prompt_parts
    from m3agent.engine.m3.tokenizer import M3Tokenizer

    tok = M3Tokenizer.from_model_dir(model_dir)
    tmpl = ChatTemplate.from_model_dir(model_dir)
    previous: list[int] = []
    out = []
    for req in engine.requests:
        mode = {"session_thinking_mode": req.session_thinking_mode} if session_mode else {}
        parts = render_prompt_parts(
            list(req.messages), list(req.tools), req.thinking_mode, template=tmpl, **mode
        )
        ids = tok.encode_parts(parts)
        out.append((ids, len(ids) - common_prefix_len(previous, ids)))
        previous = ids + engine.generated[req.request_id][:-1]
    return out


def copy_checkout(dest: Path, paths, target_tokens: int, tokenizer) -> int:
    """Copies of this checkout's text files (SOURCE_SUFFIXES) among paths (relative to ROOT)
    under dest/copyN/ until about target tokens; returns the tokens written."""
    files = []
    for rel in paths:
        p = ROOT / rel
        if p.suffix in SOURCE_SUFFIXES and p.is_file():
            files.append((rel, p.read_text(encoding="utf-8", errors="replace")))
    per_copy = sum(len(ids) for ids in tokenizer.encode_text_batch([t for _, t in files]))
    copies = max(1, -(-target_tokens // max(per_copy, 1)))
    for c in range(copies):
        for rel, text in files:
            out = dest / f"copy{c}" / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
    return per_copy * copies


def host_record() -> dict:
    return {
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": len(os.sched_getaffinity(0)),
    }
