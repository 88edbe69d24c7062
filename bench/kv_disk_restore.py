"""The KV disk tier (issue 38): a long session's prefix survives `serve --stop`.

Real processes only, on a tiny random M3 (`m3agent model init-tiny`, byte-level tokenizer: one
token per character): `m3agent run` with a prompt of --tokens characters starts a background
`m3agent serve`, which computes the whole prompt cold (the cold recompute) and writes its pages
to the disk tier; `m3agent serve --stop`; `m3agent run -c` asks one more question in a fresh
server, whose prompt is the first one plus a few dozen tokens: its pages come back from disk.

Reported: both calls' time to first token (as `run --output-format json` reports it), the
speed-up, the pages kept, and the raw time to read every page file of the model from disk in a
fresh process (page cache warm, as it is for the restore: the pages were just written), so the
restore's time to first token can be set against what the disk itself takes.

    python bench/kv_disk_restore.py --tokens 100000 --out bench/results
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from filler_text import repeated_lines  # bench/filler_text.py: this script's folder

HERE = Path(__file__).resolve().parent
M3AGENT = str(Path(sys.executable).with_name("m3agent"))
LINE = "def f_{i}(x):  # a line of a long file the session reads\n    return x * {i} + 1\n"


def run(cmd: list[str], env: dict[str, str], stdin: str | None = None) -> tuple[str, float]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, input=stdin, capture_output=True, text=True, timeout=7200)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed ({p.returncode}): {p.stderr[-2000:]}")
    return p.stdout, dt


def raw_read_s(root: Path) -> tuple[float, int, int]:
    """Seconds to read every page file under root (best of 3), pages and bytes."""
    files = sorted(root.rglob("*.kvp"))
    best = float("inf")
    total = 0
    for _ in range(3):
        t0 = time.perf_counter()
        total = 0
        for f in files:
            with open(f, "rb", buffering=0) as fh:
                buf = bytearray(os.fstat(fh.fileno()).st_size)
                total += fh.readinto(buf)
        best = min(best, time.perf_counter() - t0)
    return best, len(files), total


def chain_tokens(root: Path) -> list[int]:
    """The token ids of the longest chain of pages kept under root (from their headers)."""
    from array import array

    from m3agent.engine.native.kvstore.page_file import MAGIC

    children: dict[str | None, list[tuple[str, bytes]]] = {}
    for f in root.rglob("*.kvp"):
        data = f.read_bytes()
        assert data[:8] == MAGIC
        hlen = int.from_bytes(data[8:12], "little")
        header = json.loads(data[12 : 12 + hlen])
        tokens = data[12 + hlen : 12 + hlen + header["tokens"]]
        children.setdefault(header["parent"], []).append((header["hash"], tokens))

    def longest(parent: str | None) -> list[bytes]:
        best: list[bytes] = []
        for h, tokens in children.get(parent, []):
            path = [tokens, *longest(h)]
            best = path if len(path) > len(best) else best
        return best

    return list(array("q", b"".join(longest(None))))


def engine_restore(model: Path, kv: Path, dtype: str) -> dict:
    """The engine alone, in this process: a prompt of every kept page plus one token, so the
    whole prefix is restored and one token computed; the restore's own seconds."""
    from m3agent.engine.api import SamplingParams
    from m3agent.engine.native.core.engine_config import EngineConfig
    from m3agent.engine.native.llm import LLM

    tokens = chain_tokens(kv)
    llm = LLM.from_model_dir(model, dtype=dtype, config=EngineConfig(kv_disk_dir=str(kv)))
    out = llm.generate([[*tokens, tokens[-1]]], SamplingParams(max_tokens=1, temperature=0))[0]
    tiers = llm.page_tiers
    assert tiers is not None
    llm.close()
    return {
        "prompt_tokens": out.num_prompt_tokens,
        "restored_tokens": out.num_restored_tokens,
        "ttft_s": out.metrics.time_to_first_token_s,
        "restore_s": tiers.restore_s,
        "restored_bytes": tiers.restored_bytes,
    }


def save_overhead(model: Path, work: Path, dtype: str, tokens: int) -> dict:
    """What writing costs the steps: one cold prefill of `tokens` in this process with the tier
    (into an empty folder) and without it; the engine thread's seconds copying pages out."""
    from m3agent.engine.api import SamplingParams
    from m3agent.engine.native.core.engine_config import EngineConfig
    from m3agent.engine.native.llm import LLM

    prompt = [(i * 7) % 200 + 40 for i in range(tokens)]
    out: dict = {"tokens": tokens}
    for label, kv in (("without_tier", None), ("with_tier", work / "kv-overhead")):
        llm = LLM.from_model_dir(
            model, dtype=dtype, config=EngineConfig(kv_disk_dir=str(kv) if kv else None)
        )
        t0 = time.perf_counter()
        llm.generate([prompt], SamplingParams(max_tokens=1, temperature=0))
        out[f"{label}_s"] = time.perf_counter() - t0
        if llm.page_tiers is not None:
            out["save_s"] = llm.page_tiers.save_s
            t0 = time.perf_counter()
            llm.close()
            out["writer_drain_after_s"] = time.perf_counter() - t0
            out["pages_written"] = llm.page_tiers.tiers[0].stats.saved  # type: ignore[attr-defined]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=100_000)
    ap.add_argument("--dtype", default="bfloat16", help="weights and KV (fp32 caps CPU at ~55K)")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument(
        "--name",
        default=f"cpu-{len(os.sched_getaffinity(0))}core",
        help="the machine's name in the file name",
    )
    ap.add_argument(
        "--save-overhead",
        type=int,
        metavar="N",
        help="only measure what writing pages costs a cold prefill of N tokens, in process",
    )
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="kv-disk-bench-"))
    model = work / "model"
    if args.save_overhead:
        subprocess.run([M3AGENT, "model", "init-tiny", str(model)], check=True)
        result = save_overhead(model, work, args.dtype, args.save_overhead)
        result["host"] = {"name": args.name, "load_avg_1m": os.getloadavg()[0]}
        print(json.dumps(result, indent=1))
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        date = datetime.now(UTC).isoformat(timespec="seconds")[:10]
        name = f"kv_disk_save_overhead_{args.name}_{args.save_overhead // 1000}k_{date}.json"
        (out / name).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        return
    home = work / "home"
    ws = work / "ws"
    kv = work / "kv"
    ws.mkdir()
    home.mkdir()
    (home / "config.toml").write_text(
        f'dtype = "{args.dtype}"\ndevice = "cpu"\nkv_disk_cache_dir = "{kv}"\n'
        'context = false\napproval = "never"\n',
        encoding="utf-8",
    )
    env = {**os.environ, "M3AGENT_HOME": str(home)}
    env.pop("M3AGENT_CONFIG", None)
    subprocess.run([M3AGENT, "model", "init-tiny", str(model)], check=True, capture_output=True)
    base = [M3AGENT, "run", "--engine", "native", "--model", str(model), "-C", str(ws)]
    base += ["--max-tokens", "4", "--output-format", "json", "--thinking", "disabled"]
    prompt = "Read this file and remember it.\n" + repeated_lines(args.tokens, LINE)

    out1, wall1 = run([*base, "-"], env, stdin=prompt)
    first = json.loads(out1)["usage"]
    run([M3AGENT, "serve", "--stop"], env)
    out2, wall2 = run([*base, "-c", "What does f_7 return?"], env)
    second = json.loads(out2)["usage"]
    run([M3AGENT, "serve", "--stop"], env)
    read_s, pages, nbytes = raw_read_s(kv)  # the turn-2 pages too: what engine_restore reads
    engine = engine_restore(model, kv, args.dtype)

    cold, warm = first["time_to_first_token_s"], second["time_to_first_token_s"]
    result = {
        "bench": "kv_disk_restore",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {
            "name": args.name,
            "machine": platform.machine(),
            "cpus": len(os.sched_getaffinity(0)),
            "load_avg_1m": os.getloadavg()[0],
        },
        "dtype": args.dtype,
        "requested_tokens": args.tokens,
        "cold": {
            "prompt_tokens": first["prompt_tokens"],
            "cached_tokens": first["cached_prompt_tokens"],
            "ttft_s": cold,
            "run_wall_s": wall1,
        },
        "after_restart": {
            "prompt_tokens": second["prompt_tokens"],
            "cached_tokens": second["cached_prompt_tokens"],
            "restored_tokens": second.get("restored_prompt_tokens", 0),
            "ttft_s": warm,
            "run_wall_s": wall2,
        },
        "pages": {"files": pages, "bytes": nbytes, "raw_read_s": read_s},
        "engine_restore": engine,
        "speedup_vs_cold": cold / warm if warm else None,
        "ttft_over_raw_read": warm / read_s if read_s else None,
        "restore_over_raw_read": engine["restore_s"] / read_s if read_s else None,
        "targets": {
            "speedup_vs_cold": ">= 10",
            "ttft_over_raw_read": "<= 2",
            "restore_over_raw_read": "<= 2",
        },
    }
    text = json.dumps(result, indent=1)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    size = f"{first['prompt_tokens'] // 1000}k"
    stem = f"kv_disk_restore_{args.name}_{size}_{result['date'][:10]}.json"
    (out / stem).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
