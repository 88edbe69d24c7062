"""Load on a real `m3agent serve` (issue 27): concurrency 1, 4, 16, 64 over 500+ requests.

A tiny random M3 (init-tiny) on the native engine, served by a real `m3agent serve` process on
127.0.0.1 with a fresh data home (so the token, Host and Content-Type checks are all on the
path). Every request shares one ~3K-token system prefix and ends in its own suffix; half are
streamed (SSE), half not. Per concurrency level: requests ok / failed, latency p50 / p99
(streamed: time to the last event), generated tokens per second over the level's wall time,
the share of prompt tokens served from the prefix cache, and the server's RSS (before, peak,
after, read from /proc). One JSON object goes to --out.

    python bench/serve_load.py --out bench/results/serve_load_cpu.json
    python bench/serve_load.py --levels 1,4 --requests 6 --prefix-tokens 400   (the CI size)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from filler_text import repeated_lines  # noqa: E402  (bench/filler_text.py)

LEVELS = (1, 4, 16, 64)
QUIET_WAIT_S = 4.0  # past app/serve/quiet.py's QUIET_S and one poll


def prefix_text(tokens: int) -> str:
    """About `tokens` tokens of repository-like text (the tiny byte-level tokenizer: ~1 token
    per character)."""
    return repeated_lines(
        tokens, "def helper_{i}(x):\n    return x * {i}  # shared snapshot line\n"
    )


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Server:
    """`m3agent serve` in a subprocess on a fresh data home; its port, pid and token."""

    def __init__(self, model: Path, home: Path, env: dict[str, str] | None = None) -> None:
        """env: extra variables for the server (MALLOC_ARENA_MAX=2, say)."""
        env = {**os.environ, "M3AGENT_HOME": str(home), **(env or {})}
        env.pop("M3AGENT_CONFIG", None)
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text('device = "cpu"\n')
        # Its log goes to a file: a pipe nobody reads fills after ~1,000 requests' access
        # lines (64 KB), and the server then blocks on its next write to stderr.
        self.log = home / "serve-stderr.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "m3agent.app.cli", "serve", "--engine", "native"]
                + ["--model", str(model)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + 300
        lock = None
        while time.monotonic() < deadline and lock is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited: {self.log.read_text()[-500:]}")
            for p in (home / "serve").glob("*.json"):
                data = json.loads(p.read_text())
                if data.get("state") == "ready":
                    lock = data
            time.sleep(0.2)
        if lock is None:
            raise RuntimeError("serve did not become ready")
        self.port = lock["port"]
        self.pid = self.proc.pid
        self.token = (home / "serve" / "token").read_text().strip()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class RssWatch:
    """Samples the server's RSS every 50 ms on a thread; the peak."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, rss_kb(pid), threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_kb(self.pid))

    def stop(self) -> int:
        self._stop.set()
        self._t.join()
        return self.peak


async def one(client: httpx.AsyncClient, body: dict) -> dict:
    started = time.monotonic()
    if not body.get("stream"):
        r = await client.post("/v1/chat/completions", json=body)
        r.raise_for_status()
        usage = r.json()["usage"]
    else:
        usage = None
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    obj = json.loads(line[6:])
                    if "error" in obj:
                        raise RuntimeError(obj["error"]["message"])
                    usage = obj.get("usage") or usage
        if usage is None:
            raise RuntimeError("no usage chunk")
    return {
        "latency_s": time.monotonic() - started,
        "prompt": usage["prompt_tokens"],
        "cached": usage["prompt_tokens_details"]["cached_tokens"],
        "generated": usage["completion_tokens"],
    }


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def level(server: Server, prefix: str, concurrency: int, n: int, start: int, mt: int):
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {server.token}"}
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{server.port}",
        headers=headers,
        limits=limits,
        timeout=httpx.Timeout(600.0),
    ) as client:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(start, start + n):
            queue.put_nowait(i)
        rows: list[dict] = []
        errors: list[str] = []

        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                body = {
                    "messages": [
                        {"role": "system", "content": prefix},
                        {"role": "user", "content": f"request {i}: summarise helper_{i % 97}"},
                    ],
                    "max_tokens": mt,
                    "temperature": 0,
                    "stream": i % 2 == 1,
                    "stream_options": {"include_usage": True},
                }
                try:
                    rows.append(await one(client, body) | {"stream": body["stream"]})
                except Exception as e:  # counted and shown, never hidden
                    errors.append(f"{type(e).__name__}: {e}"[:200])

        watch = RssWatch(server.pid)
        before = rss_kb(server.pid)
        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.monotonic() - t0
        peak = watch.stop()
    lat = [r["latency_s"] for r in rows]
    prompt = sum(r["prompt"] for r in rows)
    return {
        "concurrency": concurrency,
        "requests": n,
        "ok": len(rows),
        "failed": len(errors),
        "errors": errors[:5],
        "streamed": sum(r["stream"] for r in rows),
        "wall_s": round(wall, 3),
        "latency_p50_s": round(pct(lat, 0.5) or 0, 4),
        "latency_p99_s": round(pct(lat, 0.99) or 0, 4),
        "generated_tokens_per_s": round(sum(r["generated"] for r in rows) / wall, 2),
        "requests_per_s": round(len(rows) / wall, 2),
        "prompt_tokens": prompt,
        "cached_share": round(sum(r["cached"] for r in rows) / prompt, 4) if prompt else 0.0,
        "rss_mb": {
            "before": round(before / 1024, 1),
            "peak": round(peak / 1024, 1),
            "after": round(rss_kb(server.pid) / 1024, 1),
        },
    }


def measure(
    model: Path,
    *,
    levels: tuple[int, ...] = LEVELS,
    requests: int | None = None,
    prefix_tokens: int = 3000,
    max_tokens: int = 4,
) -> dict:
    """Runs every level against one fresh server. requests: per level (default 130, so that
    the four default levels make 520 requests)."""
    prefix = prefix_text(prefix_tokens)
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        server = Server(model, Path(tmp) / "home")
        try:
            start_rss = rss_kb(server.pid)
            rows, done = [], 0
            for c in levels:
                n = requests or 130
                rows.append(asyncio.run(level(server, prefix, c, n, done, max_tokens)))
                done += n
            end_rss = rss_kb(server.pid)
        finally:
            server.stop()
    return {
        "bench": "serve_load",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "model": str(model),
        "prefix_tokens": prefix_tokens,
        "max_tokens": max_tokens,
        "total_requests": sum(r["requests"] for r in rows),
        "total_ok": sum(r["ok"] for r in rows),
        "rss_mb_start": round(start_rss / 1024, 1),
        "rss_mb_end": round(end_rss / 1024, 1),
        "levels": rows,
    }


def soak(
    model: Path,
    *,
    concurrency: int = 64,
    rounds: int = 10,
    requests: int = 130,
    prefix_tokens: int = 3000,
    max_tokens: int = 4,
    env: dict[str, str] | None = None,
    quiet: bool = False,
) -> dict:
    """One level again and again against one server: its RSS after each round (and, with
    QUIET, again after a pause with no requests). A leak grows
    every round by about the same; a cache or the allocator's arenas filling up grow in the
    first rounds and then stay (friction 12 of issue 37)."""
    prefix = prefix_text(prefix_tokens)
    with tempfile.TemporaryDirectory(prefix="serve-soak-") as tmp:
        server = Server(model, Path(tmp) / "home", env)
        try:
            start_rss = rss_kb(server.pid)
            rows, quiet_rss = [], []
            for r in range(rounds):
                rows.append(
                    asyncio.run(
                        level(server, prefix, concurrency, requests, r * requests, max_tokens)
                    )
                )
                if quiet:  # the server gives memory back once quiet (app/serve/quiet.py)
                    time.sleep(QUIET_WAIT_S)
                    quiet_rss.append(round(rss_kb(server.pid) / 1024, 1))
        finally:
            server.stop()
    after = [lv["rss_mb"]["after"] for lv in rows]
    half = len(after) // 2
    return {
        "bench": "serve_soak",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "server_env": env or {},
        "concurrency": concurrency,
        "requests_per_round": requests,
        "prefix_tokens": prefix_tokens,
        "max_tokens": max_tokens,
        "total_ok": sum(lv["ok"] for lv in rows),
        "total_requests": rounds * requests,
        "rss_mb_start": round(start_rss / 1024, 1),
        "rss_mb_after_round": after,
        # after each round and QUIET_WAIT_S of no requests (--quiet): what the server keeps
        "rss_mb_after_quiet": quiet_rss,
        # per 1,000 requests over the second half of the rounds (after the warm-up)
        "growth_mb_per_1k_second_half": round(
            (after[-1] - after[half - 1]) / ((len(after) - half) * requests) * 1000, 2
        )
        if half
        else None,
    }


def tiny_model(where: Path) -> Path:
    from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

    spec = TinySpec(
        layers=2,
        hidden=64,
        heads=1,
        kv_heads=1,
        head_dim=32,
        experts=2,
        dense_layers=1,
        intermediate=64,
        dense_intermediate=64,
    )
    return init_tiny(where / "tiny", spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, help="checkpoint (default: a fresh tiny M3)")
    ap.add_argument("--levels", default=",".join(map(str, LEVELS)))
    ap.add_argument("--requests", type=int, help="per level (default 130: 520 in all)")
    ap.add_argument("--prefix-tokens", type=int, default=3000)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument(
        "--soak", type=int, metavar="ROUNDS", help="repeat the last level ROUNDS times instead"
    )
    ap.add_argument(
        "--quiet", action="store_true", help="with --soak: also RSS after a pause each round"
    )
    ap.add_argument(
        "--server-env", action="append", default=[], metavar="NAME=VALUE", help="(repeatable)"
    )
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    levels = tuple(int(x) for x in a.levels.split(","))
    server_env = dict(kv.split("=", 1) for kv in a.server_env)
    with tempfile.TemporaryDirectory(prefix="serve-load-model-") as tmp:
        model = a.model or tiny_model(Path(tmp))
        if a.soak:
            result = soak(
                model,
                concurrency=levels[-1],
                rounds=a.soak,
                requests=a.requests or 130,
                prefix_tokens=a.prefix_tokens,
                max_tokens=a.max_tokens,
                env=server_env,
                quiet=a.quiet,
            )
        else:
            result = measure(
                model,
                levels=levels,
                requests=a.requests,
                prefix_tokens=a.prefix_tokens,
                max_tokens=a.max_tokens,
            )
    text = json.dumps(result, indent=2)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
