"""Issue 12 point 3: a thinking toggle every turn recomputes only the new tokens (+ one page).

A tiny random M3 (init-tiny) on the native engine, behind a real `m3agent serve` HTTP server
on 127.0.0.1 (ChatServer over http.start, in this process). A snapshot of about --snapshot
tokens opens the prompt as the one leading system message; then --turns user turns, the
thinking mode cycling enabled -> disabled -> adaptive -> ... so it changes every turn. Two
clients, each against its own fresh server (so neither warms the other's cache):

- serve:  plain HTTP to /v1/chat/completions, chat_template_kwargs.thinking_mode per turn,
          the model's exact output sent back as `raw_text` (m3agent serve renders it).
- remote: our RemoteEngine (it finds owned_by "m3agent", renders the prompt itself with the
          checkpoint's tokenizer and sends token ids to /v1/completions).

Per turn: prompt, cached, recomputed tokens, new tokens (not in the previous prompt + output)
and whether recomputed <= new + 128. Writes one JSON object to --out.

One output token per turn by default (--max-tokens): a random model's output need not survive
detokenize -> re-encode token for token (a real model's does, nearly always), and a sampled
token is never fed back, so one token keeps the figure about the prompt, which is what a
toggle could break (had the mode been written in the system block, every turn would miss
from token ~100 on).

    python bench/toggle_session.py --snapshot 100000 --out bench/results/toggle_session_cpu.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from filler_text import repeated_lines  # noqa: E402  (bench/filler_text.py)

PAGE = 128
MODES = ("enabled", "disabled", "adaptive")


def snapshot_text(tokens: int) -> str:
    """About `tokens` tokens of source-like text (the byte-level tiny tokenizer: ~1 per char)."""
    return repeated_lines(tokens, "def f{i}(x):\n    return x + {i}  # repository snapshot line\n")


def row(turn: int, mode: str, usage: dict, prev_total: int | None) -> dict:
    prompt = int(usage["prompt_tokens"])
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    new = prompt if prev_total is None else prompt - prev_total
    recomputed = prompt - cached
    return {
        "turn": turn,
        "mode": mode,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "recomputed_tokens": recomputed,
        "new_tokens": new,
        "within_target": turn == 1 or recomputed <= new + PAGE,
        "completion_tokens": int(usage["completion_tokens"]),
    }


async def serve_client(url: str, snapshot: str, turns: int, max_tokens: int) -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": snapshot}]
    rows: list[dict] = []
    prev_total = None
    async with httpx.AsyncClient(timeout=3600) as client:
        for t in range(turns):
            mode = MODES[t % 3]
            messages.append({"role": "user", "content": f"Question {t + 1}: what does f{t} do?"})
            r = await client.post(
                f"{url}/chat/completions",
                json={
                    "model": "tiny",
                    "messages": messages,
                    "max_tokens": max_tokens,
                    "temperature": 0,
                    "chat_template_kwargs": {"thinking_mode": mode},
                },
            )
            r.raise_for_status()
            obj = r.json()
            msg = obj["choices"][0]["message"]
            raw = msg.get("raw_text")
            rows.append(row(t + 1, mode, obj["usage"], prev_total))
            prev_total = obj["usage"]["prompt_tokens"] + obj["usage"]["completion_tokens"]
            messages.append(
                {
                    "role": "assistant",
                    "content": msg.get("content") or "",
                    "raw_text": raw,
                    "thinking_mode": mode,
                }
            )
    return rows


async def remote_client(
    url: str, model_dir: Path, snapshot: str, turns: int, max_tokens: int
) -> list[dict]:
    from m3agent.engine.api import ChatRequest, Message, SamplingParams, UsageDelta
    from m3agent.engine.backends.remote import RemoteEngine
    from m3agent.engine.m3.chat_template import ChatTemplate
    from m3agent.engine.m3.tokenizer import M3Tokenizer

    engine = RemoteEngine(
        url,
        "tiny",
        retries=0,
        timeout=3600,
        tokenizer=M3Tokenizer.from_model_dir(model_dir),
        template=ChatTemplate.from_model_dir(model_dir),
    )
    messages: list[Message] = [Message("system", snapshot)]
    rows: list[dict] = []
    prev_total = None
    try:
        for t in range(turns):
            mode = MODES[t % 3]
            messages.append(Message("user", f"Question {t + 1}: what does f{t} do?"))
            req = ChatRequest(
                f"t{t}",
                tuple(messages),
                thinking_mode=mode,
                sampling=SamplingParams(max_tokens=max_tokens, temperature=0),
            )
            final = [d async for d in engine.stream(req) if isinstance(d, UsageDelta)][-1]
            u = final.usage
            usage = {
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.generated_tokens,
                "prompt_tokens_details": {"cached_tokens": u.cached_prompt_tokens},
            }
            rows.append(row(t + 1, mode, usage, prev_total))
            prev_total = u.prompt_tokens + u.generated_tokens
            messages.append(Message("assistant", "", raw_text=final.raw_text, thinking_mode=mode))
        assert engine._completions is True, "the remote backend did not use /v1/completions"
    finally:
        await engine.close()
    return rows


async def with_server(model_dir: Path, max_len: int, device: str, run) -> tuple[list, float]:
    from m3agent.app.serve.http import start
    from m3agent.app.serve.server import ChatServer, ServeConfig
    from m3agent.engine.backends.native import NativeEngine
    from m3agent.engine.native.core.engine_config import EngineConfig

    blocks = max_len // PAGE + 8
    engine = NativeEngine.from_model_dir(
        model_dir,
        device=device,
        config=EngineConfig(
            max_model_len=max_len, num_gpu_blocks=blocks, max_num_batched_tokens=8192
        ),
    )
    with tempfile.TemporaryDirectory() as media:
        server = await start(ChatServer(engine, ServeConfig("tiny", Path(media))).handle, port=0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        started = time.monotonic()
        try:
            rows = await run(url)
        finally:
            server.close()
            await server.wait_closed()
            await engine.close()
    return rows, time.monotonic() - started


def measure(
    model_dir: Path, snapshot_tokens: int, turns: int, max_tokens: int = 1, device: str = "cpu"
) -> dict:
    snap = snapshot_text(snapshot_tokens)
    max_len = snapshot_tokens + 4096 + turns * (max_tokens + 64)
    out: dict = {
        "snapshot_tokens_requested": snapshot_tokens,
        "turns": turns,
        "modes": [MODES[t % 3] for t in range(turns)],
        "page": PAGE,
    }
    rows, secs = asyncio.run(
        with_server(
            model_dir, max_len, device, lambda url: serve_client(url, snap, turns, max_tokens)
        )
    )
    out["serve"] = {
        "rows": rows,
        "seconds": round(secs, 2),
        "all_within_target": all(r["within_target"] for r in rows),
    }
    rows, secs = asyncio.run(
        with_server(
            model_dir,
            max_len,
            device,
            lambda url: remote_client(url, model_dir, snap, turns, max_tokens),
        )
    )
    out["remote"] = {
        "rows": rows,
        "seconds": round(secs, 2),
        "all_within_target": all(r["within_target"] for r in rows),
    }
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--snapshot", type=int, default=100_000)
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--max-tokens", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument(
        "--dense-layers",
        type=int,
        default=0,
        help="dense-attention layers (the rest are MSA: sparse, cheap at 100K on CPU)",
    )
    p.add_argument("--out", type=Path, default=Path("bench/results/toggle_session_cpu.json"))
    a = p.parse_args()
    from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

    with tempfile.TemporaryDirectory() as d:
        model = init_tiny(
            Path(d) / "tiny",
            TinySpec(
                layers=a.layers,
                hidden=a.hidden,
                heads=a.heads,
                kv_heads=1,
                head_dim=a.head_dim,
                experts=2,
                dense_layers=a.dense_layers,
                intermediate=64,
                dense_intermediate=64,
            ),
        )
        result = measure(model, a.snapshot, a.turns, a.max_tokens, a.device)
    result["model"] = {
        "layers": a.layers,
        "dense_layers": a.dense_layers,
        "hidden": a.hidden,
        "heads": a.heads,
        "head_dim": a.head_dim,
        "device": a.device,
    }
    result["python"] = sys.version.split()[0]
    result["machine"] = platform.machine()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    for path in ("serve", "remote"):
        r = result[path]
        print(path, "within target:", r["all_within_target"], f"{r['seconds']}s")
        for x in r["rows"]:
            print(
                f"  turn {x['turn']:2d} {x['mode']:8s} prompt {x['prompt_tokens']:7d} "
                f"cached {x['cached_tokens']:7d} recomputed {x['recomputed_tokens']:5d} "
                f"new {x['new_tokens']:5d}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
