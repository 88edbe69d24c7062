"""Where a disk-tier restore's time goes (issue 38 item 2), without the cold prefill.

bench/kv_disk_restore.py measures the product end to end, but its cold prefill of 47K tokens
takes 20 minutes on a 2-core machine. Here the pages are made directly: a tiny random M3
(`m3agent model init-tiny`, the same as that bench) in an engine with the disk tier, its cache
filled with small random values, every block saved under the block-hash chain of a --tokens
long prompt (the engine's own hashing and page files). Then, in a fresh process each:

* the raw read: every page file read into a buffer (best of 3, page cache warm, as it is for
  a restore right after the pages were written);
  (--repeat pairs of these two, medians reported: the shared machine's load makes one noisy)
* the engine's restore: a fresh engine gets the prompt plus one token, restores every page and
  computes one token; restore_s (PageTiers' own clock), the time to first token, and the
  top of a cProfile of the whole call (--profile).

    python bench/kv_restore_profile.py --tokens 47360 --out bench/results

Another version of the engine's code is measured the same way by putting it first on the path
(`git archive REV | tar -x -C src`, links src/{agent,app,engine,tools} under farm/m3agent/, then
PYTHONPATH=farm ... --label REV): the stages are child processes and inherit it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from statistics import median

M3AGENT = str(Path(sys.executable).with_name("m3agent"))


def prompt(n: int) -> list[int]:
    return [(i * 7) % 200 + 40 for i in range(n)]


def make_pages(model: Path, kv: Path, dtype: str, tokens: int) -> dict:
    import torch
    from m3agent.engine.native.core.attention_metadata import BLOCK_SIZE
    from m3agent.engine.native.core.block_hash import token_bytes
    from m3agent.engine.native.core.engine_config import EngineConfig
    from m3agent.engine.native.kvstore.page_file import PageKey
    from m3agent.engine.native.llm import LLM

    blocks = tokens // BLOCK_SIZE
    config = EngineConfig(kv_disk_dir=str(kv), num_gpu_blocks=blocks + 2)
    llm = LLM.from_model_dir(model, dtype=dtype, config=config)
    tiers, manager = llm.page_tiers, llm.kv_cache_manager
    assert tiers is not None
    g = torch.Generator().manual_seed(0)
    for cache in llm.runner.caches:
        for t in (cache.kv, cache.index):
            if t is not None:
                t.copy_((torch.randn(t.shape, generator=g) * 0.1).to(t.dtype))
    data = token_bytes(prompt(blocks * BLOCK_SIZE))
    step, parent = BLOCK_SIZE * 8, None
    for i in range(blocks):
        chunk = data[i * step : (i + 1) * step]
        h = manager.hash_fn(parent, chunk, ())
        tiers.save(i + 1, PageKey(h, parent, bytes(chunk)))
        parent = h
    llm.close()
    return {"pages": blocks, "page_bytes": tiers.payload_bytes(llm.runner.caches)}


def raw_read(kv: Path) -> dict:
    files = sorted(kv.rglob("*.kvp"))
    best, total = float("inf"), 0
    for _ in range(3):
        t0 = time.perf_counter()
        total = 0
        for f in files:
            with open(f, "rb", buffering=0) as fh:
                buf = bytearray(os.fstat(fh.fileno()).st_size)
                total += fh.readinto(buf)
        best = min(best, time.perf_counter() - t0)
    return {"files": len(files), "bytes": total, "raw_read_s": best}


def restore(model: Path, kv: Path, dtype: str, tokens: int, profile: bool) -> dict:
    from m3agent.engine.api import SamplingParams
    from m3agent.engine.native.core.attention_metadata import BLOCK_SIZE
    from m3agent.engine.native.core.engine_config import EngineConfig
    from m3agent.engine.native.llm import LLM

    t0 = time.perf_counter()
    llm = LLM.from_model_dir(model, dtype=dtype, config=EngineConfig(kv_disk_dir=str(kv)))
    load_s = time.perf_counter() - t0
    ids = prompt(tokens // BLOCK_SIZE * BLOCK_SIZE + 1)
    params = SamplingParams(max_tokens=1, temperature=0)
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    out = llm.generate([ids], params)[0]
    call_s = time.perf_counter() - t0
    top: list[str] = []
    if prof is not None:
        import io
        import pstats

        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(25)
        top = [line for line in text.getvalue().splitlines() if line.strip()][:40]
    tiers = llm.page_tiers
    assert tiers is not None
    llm.close()
    return {
        "load_s": load_s,
        "generate_s": call_s,
        "prompt_tokens": out.num_prompt_tokens,
        "restored_tokens": out.num_restored_tokens,
        "ttft_s": out.metrics.time_to_first_token_s,
        "restore_s": tiers.restore_s,
        "restored_bytes": tiers.restored_bytes,
        "profile": top,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=47_360)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--out", default=None, help="a folder for the JSON result")
    ap.add_argument("--name", default=f"cpu-{len(os.sched_getaffinity(0))}core")
    ap.add_argument("--profile", action="store_true", help="cProfile the restoring call")
    ap.add_argument("--label", default="", help="which code this is (in the file name too)")
    ap.add_argument(
        "--repeat", type=int, default=3, help="raw read + restore pairs (medians reported)"
    )
    ap.add_argument("--stage", choices=("make", "raw", "restore"), help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.stage:  # one stage in a fresh process
        work = Path(args.work)
        model, kv = work / "model", work / "kv"
        if args.stage == "make":
            result = make_pages(model, kv, args.dtype, args.tokens)
        elif args.stage == "raw":
            result = raw_read(kv)
        else:
            result = restore(model, kv, args.dtype, args.tokens, args.profile)
        print(json.dumps(result))
        return

    work = Path(tempfile.mkdtemp(prefix="kv-restore-profile-"))
    subprocess.run(
        [M3AGENT, "model", "init-tiny", str(work / "model")], check=True, capture_output=True
    )

    def stage(name: str) -> dict:
        cmd = [sys.executable, __file__, "--stage", name, "--work", str(work)]
        cmd += ["--tokens", str(args.tokens), "--dtype", args.dtype]
        cmd += ["--profile"] if args.profile else []
        done = subprocess.run(cmd, check=True, capture_output=True, text=True)
        result: dict = json.loads(done.stdout.splitlines()[-1])
        return result

    try:
        made = stage("make")
        runs = [(stage("raw"), stage("restore")) for _ in range(args.repeat)]
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the model and the pages: hundreds of MB
    raw = {**runs[0][0], "raw_read_s": median(r["raw_read_s"] for r, _ in runs)}
    engine = {
        **runs[-1][1],
        "restore_s": median(e["restore_s"] for _, e in runs),
        "ttft_s": median(e["ttft_s"] for _, e in runs),
        "runs": [
            {"raw_read_s": r["raw_read_s"], "restore_s": e["restore_s"], "ttft_s": e["ttft_s"]}
            for r, e in runs
        ],
    }
    result = {
        "bench": "kv_restore_profile",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {
            "name": args.name,
            "machine": platform.machine(),
            "cpus": len(os.sched_getaffinity(0)),
            "load_avg_1m": os.getloadavg()[0],
        },
        "dtype": args.dtype,
        "code": args.label or "this checkout",
        "made": made,
        "pages": raw,
        "engine_restore": engine,
        "restore_over_raw_read": engine["restore_s"] / raw["raw_read_s"],
        "ttft_over_raw_read": engine["ttft_s"] / raw["raw_read_s"],
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        label = f"_{args.label}" if args.label else ""
        name = f"kv_restore_profile_{args.name}_{args.tokens // 1000}k{label}_{result['date'][:10]}.json"
        (out / name).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
